/* protocol.c: the model and tool process protocols (see protocol.h). */
