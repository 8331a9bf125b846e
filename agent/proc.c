/* proc.c: running model and tool commands (see proc.h). */
