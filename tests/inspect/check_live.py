#!/usr/bin/env python3
"""Checks `umpool-inspect show PID --json` against what tests/inspect/holder
says it allocated. Usage: check_live.py JSON HOLDER_OUTPUT PID"""
import json
import sys

FLAGS = {1: "no_spill", 2: "offload"}


def fail(msg):
    print("FAIL: %s" % msg)
    sys.exit(1)


def main():
    doc = json.load(open(sys.argv[1]))
    pid = int(sys.argv[3])
    runs, slab, evicted, ranks = [], None, False, 0
    for line in open(sys.argv[2]):
        f = line.split()
        if f and f[0] == "ALLOC":
            runs.append((int(f[1]), int(f[2]), int(f[3])))
        elif f and f[0] == "SLAB":
            slab = (int(f[1]), int(f[2]))
        elif f and f[0] == "EVICTED":
            evicted = f[1] == "1"
        elif f and f[0] == "ALLREDUCE":
            ranks = int(f[1])
    if not runs or slab is None:
        fail("holder said nothing")

    pools = doc["pools"]
    if len(pools) != 1 or pools[0]["pid"] != pid:
        fail("expected one pool of pid %d, got %s" %
             (pid, [(p["pid"], p["pool"]) for p in pools]))
    pool = pools[0]
    chunk = pool["chunk_size"]
    devs = pool["devices"]
    if len(devs) != 4 or pool["backend"] != "sim":
        fail("expected the 4-device sim machine")

    # The largest allocations: the runs, largest first, as allocated.
    got = [(a["device"], a["size"], a["flags"], a["tier"])
           for a in pool["largest_allocations"]]
    want = []
    for dev, size, flags in sorted(runs, key=lambda r: -r[1]):
        names = [FLAGS[b] for b in sorted(FLAGS) if flags & b]
        moved = evicted and flags & 2
        want.append((dev, size, names, "host" if moved else "device"))
    if got != want:
        fail("largest allocations %s, expected %s" % (got, want))
    for a in pool["largest_allocations"]:
        if not 0 <= a["age_s"] < 600:
            fail("age %s" % a["age_s"])

    # Per device: counts, and bytes rounded as the pool rounds them.
    for d, dev in enumerate(devs):
        mine = [s for (x, s, _) in runs if x == d]
        count = len(mine) + (1 if slab[0] == d else 0)
        # the allreduce's two buffers per rank, made and freed
        made = count + (2 if d < ranks else 0)
        if dev["live_count"] != count or dev["alloc_count"] != made:
            fail("device %d: live_count %d alloc_count %d, expected %d, %d"
                 % (d, dev["live_count"], dev["alloc_count"], count, made))
        run_bytes = sum((s + chunk - 1) // chunk * chunk for s in mine)
        lo = run_bytes + (slab[1] if slab[0] == d else 0)
        hi = run_bytes + (slab[1] * 5 // 4 + 256 if slab[0] == d else 0)
        if not lo <= dev["live_bytes"] <= hi:
            fail("device %d: live_bytes %d, expected %d..%d" %
                 (d, dev["live_bytes"], lo, hi))
        mem = dev["memory"]
        if mem["used"] + mem["cached"] + mem["free"] != dev["capacity"]:
            fail("device %d: memory %s does not add up to %d" %
                 (d, mem, dev["capacity"]))
        if mem["host"] != dev["host_bytes"] or mem["nvme"] != dev["nvme_bytes"]:
            fail("device %d: memory %s, tiers %d/%d" %
                 (d, mem, dev["host_bytes"], dev["nvme_bytes"]))
    total = sum(1 for _ in runs) + 1
    if pool["totals"]["live_count"] != total:
        fail("totals.live_count %d, expected %d" %
             (pool["totals"]["live_count"], total))
    if evicted:
        moved = sum(s for (_, s, f) in runs if f & 2)
        if devs[0]["host_bytes"] != moved or devs[0]["spill_count"] < 1:
            fail("device 0: host_bytes %d spills %d, expected %d moved" %
                 (devs[0]["host_bytes"], devs[0]["spill_count"], moved))
        host = pool["tiers"][0]
        if not host["enabled"] or host["used_bytes"] < moved:
            fail("host tier %s" % host)
    print("live ok: %d allocations of pid %d" % (total, pid))


main()
