/*
 * convtree.h: a red-black tree (<bsd/sys/tree.h>) of records keyed by
 * conversation id, as the supervisor keeps worker records (workers.c) and
 * the waiters of each conversation (waiters.c). The record type holds the
 * id in a `char field[N]` array of its own; the generated lookup builds its
 * key in a record on the stack, so an id too long to be any record's key
 * finds nothing (and is never copied past the array).
 *
 *   CONVTREE_GENERATE(name, type, node, field) defines, static to the file:
 *     RB_HEAD(name, type) and its RB_GENERATE on `node` (an RB_ENTRY in type;
 *       the tree's functions are extern, named after the tree, as before),
 *     struct type *name_find(struct name *head, const char *conv):
 *       the record for conv, or NULL;
 *     int name_insert(struct name *head, struct type *rec, const char *conv):
 *       copy conv into rec->field and insert rec: 0, or -EINVAL when conv
 *       does not fit the field, -EEXIST when a record for it is there (rec
 *       is then left out of the tree);
 *     struct type *name_new(struct name *head, const char *conv):
 *       a new zeroed record (calloc: free it with free) inserted for conv,
 *       or NULL when out of memory, conv does not fit, or it is there.
 */
#ifndef AGENTD_CONVTREE_H
#define AGENTD_CONVTREE_H

#include <bsd/sys/tree.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CONVTREE_GENERATE(name, type, node, field)                                      \
	RB_HEAD(name, type);                                                            \
	static inline int name##_cmp(struct type *a, struct type *b)                    \
	{                                                                               \
		return strcmp(a->field, b->field);                                      \
	}                                                                               \
	RB_PROTOTYPE(name, type, node, name##_cmp)                                      \
	RB_GENERATE(name, type, node, name##_cmp)                                       \
	static inline struct type *name##_find(struct name *head, const char *conv)     \
	{                                                                               \
		struct type key;                                                        \
		size_t n = strlen(conv);                                                \
		if (n >= sizeof key.field)                                              \
			return NULL;                                                    \
		memcpy(key.field, conv, n + 1);                                         \
		return RB_FIND(name, head, &key);                                       \
	}                                                                               \
	static inline int name##_insert(struct name *head, struct type *rec, const char *conv) \
	{                                                                               \
		size_t n = strlen(conv);                                                \
		if (n >= sizeof rec->field)                                             \
			return -EINVAL;                                                 \
		memcpy(rec->field, conv, n + 1);                                        \
		return RB_INSERT(name, head, rec) ? -EEXIST : 0;                        \
	}                                                                               \
	static inline struct type *name##_new(struct name *head, const char *conv)      \
	{                                                                               \
		struct type *rec = calloc(1, sizeof *rec);                              \
		if (rec && name##_insert(head, rec, conv)) {                            \
			free(rec);                                                      \
			return NULL;                                                    \
		}                                                                       \
		return rec;                                                             \
	}

#endif
