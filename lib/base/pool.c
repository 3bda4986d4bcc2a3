/*
 * pool.c - a persistent thread pool, one per context.
 *
 * rvl_pool_run(p, fn, arg) runs fn(arg, i, n) on all n threads (the caller
 * is thread 0) and returns when every thread has finished: one fork/join
 * per operation, no thread created per operation. Workers wait for the next
 * job by spinning briefly on an atomic generation counter, then sleep on a
 * condition variable, so a decode loop of small matmuls does not pay a
 * futex wake per operation while an idle pool costs no CPU.
 *
 * A new thread starts on its creator's CPU when the scheduler sees no
 * better one (another just busy: a thread of the model load that has just
 * ended), and a spinning worker there shares that CPU with the caller of
 * the first jobs until the load balancer moves it: a fresh process's
 * first forward pass then ran on one core for its first ~25 ms (SmolLM2
 * Q4_0, 31 tokens, 2 threads: 36-50 ms instead of 21, `perf sched
 * timehist`). So on Linux the workers are created off the creator's CPU
 * and take the process's CPU set back once they run.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "ruvllm.h"

#define SPIN_ITERS 20000

struct rvl_pool {
    int n;                          /* threads including the caller */
#ifdef __linux__
    cpu_set_t cpus;                 /* the process's CPU set, given back to workers */
    bool off_cpu;                   /* workers were created off the creator's CPU */
#endif
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;                /* bumped for each job */
    atomic_int pending;             /* workers still running the job */
    atomic_bool stop;
    rvl_pool_fn fn;
    void *arg;
};

typedef struct {
    struct rvl_pool *p;
    int idx;
} worker_arg;

static void *worker(void *varg)
{
    worker_arg wa = *(worker_arg *)varg;
    struct rvl_pool *p = wa.p;
    unsigned seen = 0;

    free(varg);
#ifdef __linux__
    if (p->off_cpu)
        (void)pthread_setaffinity_np(pthread_self(), sizeof p->cpus, &p->cpus);
#endif
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
                if ((spins & 1023) == 0)
                    sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = g;
        p->fn(p->arg, wa.idx, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

int rvl_pool_open(rvl_pool **out, int n_threads)
{
    struct rvl_pool *p;

    *out = NULL;
    if (n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)nc : 1;
    }
    if (n_threads > 256)
        return rvl_seterr(RVL_EINVAL, "%d threads is too many (at most 256)", n_threads);
    p = calloc(1, sizeof *p);
    if (!p)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->tids = calloc((size_t)n_threads, sizeof *p->tids);
    if (!p->tids) {
        free(p);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    pthread_attr_t *pattr = NULL;
#ifdef __linux__
    pthread_attr_t attr;
    /* start the workers on the CPUs but the creator's (when it has others) */
    const int here = sched_getcpu();
    cpu_set_t off;
    if (here >= 0 && here < CPU_SETSIZE &&
        pthread_getaffinity_np(pthread_self(), sizeof p->cpus, &p->cpus) == 0 &&
        CPU_ISSET(here, &p->cpus) && CPU_COUNT(&p->cpus) > 1 && pthread_attr_init(&attr) == 0) {
        off = p->cpus;
        CPU_CLR(here, &off);
        if (pthread_attr_setaffinity_np(&attr, sizeof off, &off) == 0) {
            pattr = &attr;
            p->off_cpu = true;
        } else {
            pthread_attr_destroy(&attr);
        }
    }
#endif
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->p = p;
            wa->idx = i;
        }
        if (!wa || pthread_create(&p->tids[i], pattr, worker, wa) != 0) {
            if (pattr)
                pthread_attr_destroy(pattr);
            free(wa);
            p->n = i;
            rvl_pool_close(p);
            return rvl_seterr(RVL_EIO, "cannot create thread %d", i);
        }
    }
    if (pattr)
        pthread_attr_destroy(pattr);
    *out = p;
    return 0;
}

void rvl_pool_run(rvl_pool *p, rvl_pool_fn fn, void *arg)
{
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    /* spin briefly, then yield: when the machine is oversubscribed a
     * preempted worker must get the CPU back rather than watch us spin */
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins < 4096) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
    }
}

int rvl_pool_size(const rvl_pool *p)
{
    return p->n;
}

void rvl_pool_close(rvl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->tids[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->tids);
    free(p);
}
