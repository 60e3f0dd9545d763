/*
 * The one intrusive doubly linked list of the library. A node is embedded
 * in its element (struct block's `link`, ...) and the element is found back
 * with ump_container_of. The list is NULL-terminated, not circular, so that
 * a zeroed list (calloc) is a valid empty one and a zeroed node is "in no
 * list": the structs that hold lists are allocated zeroed and need no
 * initialisation pass. Every operation is O(1); none allocates; the caller
 * provides the locking.
 */
#ifndef UMP_UTIL_LIST_H
#define UMP_UTIL_LIST_H

#include <stdbool.h>
#include <stddef.h>

#define ump_container_of(ptr, type, member)                                    \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

struct ump_list_node {
    struct ump_list_node *prev, *next;
};

struct ump_list {
    struct ump_list_node *first, *last;
};

static inline bool ump_list_empty(const struct ump_list *l)
{
    return !l->first;
}

static inline void ump_list_push_front(struct ump_list *l,
                                       struct ump_list_node *n)
{
    n->prev = NULL;
    n->next = l->first;
    if (l->first)
        l->first->prev = n;
    else
        l->last = n;
    l->first = n;
}

static inline void ump_list_push_back(struct ump_list *l,
                                      struct ump_list_node *n)
{
    n->next = NULL;
    n->prev = l->last;
    if (l->last)
        l->last->next = n;
    else
        l->first = n;
    l->last = n;
}

/* n must be in l. It leaves with both links NULL. */
static inline void ump_list_remove(struct ump_list *l, struct ump_list_node *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        l->first = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        l->last = n->prev;
    n->prev = n->next = NULL;
}

/* The first node, taken off the list; NULL when empty. */
static inline struct ump_list_node *ump_list_pop_front(struct ump_list *l)
{
    struct ump_list_node *n = l->first;
    if (n)
        ump_list_remove(l, n);
    return n;
}

/* Iterates over the elements of type `type` linked by `member`; `it` is a
 * pointer to the element. Not safe against removing it: use
 * ump_list_for_each_safe for that. */
#define ump_list_entry_or_null(node, type, member)                             \
    ((node) ? ump_container_of(node, type, member) : NULL)
#define ump_list_for_each(it, list, type, member)                              \
    for (type *it = ump_list_entry_or_null((list)->first, type, member); it;   \
         it = ump_list_entry_or_null(it->member.next, type, member))
/* Last to first (the LRU's coldest first). */
#define ump_list_for_each_reverse(it, list, type, member)                      \
    for (type *it = ump_list_entry_or_null((list)->last, type, member); it;    \
         it = ump_list_entry_or_null(it->member.prev, type, member))
#define ump_list_for_each_safe(it, nx, list, type, member)                     \
    for (type *it = ump_list_entry_or_null((list)->first, type, member),       \
              *nx = it ? ump_list_entry_or_null(it->member.next, type, member) \
                       : NULL;                                                 \
         it; it = nx,                                                          \
              nx = it ? ump_list_entry_or_null(it->member.next, type, member)  \
                      : NULL)

#endif
