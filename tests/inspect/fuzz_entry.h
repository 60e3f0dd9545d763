/*
 * The snapshot parser's fuzz entry (tests/fuzz_snapshot.c), for libFuzzer
 * and for test_inspect_parse, which feeds it a corpus of truncated and
 * mutated snapshots in every make check.
 */
#ifndef FUZZ_ENTRY_H
#define FUZZ_ENTRY_H

#include <stddef.h>
#include <stdint.h>

/* The uid fuzz inputs are checked against: seeds are made with
 * `mksnap FILE --uid 1000`. */
#define FUZZ_UID 1000u

/* Parses data as a segment owned by FUZZ_UID and, when it is accepted,
 * renders it in every output format. Returns what snap_parse returned;
 * aborts when a rejection's message is not one non-empty line. */
int fuzz_snapshot_one(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
