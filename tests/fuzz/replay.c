/*
 * replay.c - feeds files to a libFuzzer harness without libFuzzer, so
 * `make check` (and `make asan`) replays every corpus: a crash, leak or
 * sanitizer report fails the run.
 *
 * usage: replay_X FILE_OR_DIR...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) {
        fclose(f);
        return -1;
    }
    /* exact-size copy so ASan catches reads past the input */
    uint8_t *buf = malloc(n ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int count = 0, errors = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            errors += replay_file(argv[i]) < 0;
            count++;
            continue;
        }
        struct dirent **ents;
        int n = scandir(argv[i], &ents, NULL, NULL);
        if (n < 0) {
            perror(argv[i]);
            return 1;
        }
        char **names = malloc(sizeof *names * (size_t)(n ? n : 1));
        int m = 0;
        for (int k = 0; k < n; k++) {
            if (ents[k]->d_name[0] != '.')
                names[m++] = strdup(ents[k]->d_name);
            free(ents[k]);
        }
        free(ents);
        qsort(names, (size_t)m, sizeof *names, cmp);
        for (int k = 0; k < m; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            errors += replay_file(path) < 0;
            count++;
            free(names[k]);
        }
        free(names);
    }
    printf("replayed %d inputs, %d unreadable\n", count, errors);
    return errors ? 1 : 0;
}
