/*
 * chat_input.h - how `ruvllm chat` reads messages (cmd/chat_input.c).
 */
#ifndef RVL_CHAT_INPUT_H
#define RVL_CHAT_INPUT_H

#include <stdbool.h>
#include <stdio.h>

typedef struct {
    bool color;                     /* a colored prompt */
    const char *const *commands;    /* /command names to complete (NULL-terminated) */
    const char *const *settings;    /* names to complete after "/set " (NULL-terminated) */
    void (*hint)(void *ud, const char *msg);  /* prints one line of help (Ctrl-C at an empty prompt) */
    void *ud;                       /* hint's first argument */
} chat_input_cfg;

/* Set up readline (standard input is a terminal) and the history file
 * ${XDG_STATE_HOME:-$HOME/.local/state}/ruvllm/history (directory 0700,
 * file 0600; without it, a message and no history). cfg's arrays are
 * borrowed until chat_input_close. */
void chat_input_open(const chat_input_cfg *cfg);
void chat_input_close(void);   /* trims the history file to 2000 lines */

/* One message from the terminal: a line, lines joined by a trailing
 * backslash, or the lines between two lines of """ (the opening """ may
 * have text after it, the closing one text before it). The message's
 * lines as typed are one history entry (the Up arrow recalls all of it,
 * and sending it again reads its lines as they were typed); the history
 * file keeps it whole (readline >= 8: timestamps and multi-line entries). 1: *msg (owned, free()), 0: end of input (Ctrl-D),
 * -1: Ctrl-C (the line is dropped; at an empty prompt cfg.hint says how
 * to leave). SIGINT is handled here while waiting for input; the caller's
 * handler is restored before returning. */
int chat_input_message(char **msg);

/* One message from a script: a line without its newline (and a CR before
 * it) or, with nul, a NUL-terminated record. 1: *msg (owned), 0: end of
 * input, -1: read error (reported) or Ctrl-C (rvl_interrupted). */
int chat_input_record(FILE *in, bool nul, char **msg);

#endif
