"""Model check of the attention forward's ping-pong turns under persistent=1
(kernel_sources/attention_fwd_hopper.cuh: consume's turn_wait / turn_pass, run_persistent's pairs of
turn barriers): every interleaving of the two consumer warpgroups over every walk of 1..4 tiles with
0..2 KV blocks each, with named barriers as PTX defines them (a barrier of 256 threads completes at the
256th arrival, whoever arrives: two bar.arrive of one 128-thread warpgroup complete it).

    python3 tools/pingpong_model.py            # the kernel's protocol: no walk may hang
    python3 tools/pingpong_model.py --before   # the protocol before 2026-12-01: walks that hang

A walk is bad when a barrier completes on one consumer's arrivals alone (the other then waits on the
next round: a hang), when no consumer can move before both are done, or when both are done with a
barrier left half-arrived."""
import argparse
import itertools

SCHED = 3      # SCHED_BARRIER: consumer c waits on SCHED + c (+ 2 on every other tile)


def programs(blocks, skip_empty):
    """The two consumers' barrier operations over a walk: ('arrive' | 'sync', barrier id)."""
    c0, c1, odd = [], [], 0
    for n in blocks:
        s = SCHED + 2 * odd
        if not (skip_empty and n == 0):
            c1.append(("arrive", s))                          # consumer 1 hands consumer 0 the first turn
            for _ in range(n):
                c0 += [("sync", s), ("arrive", s + 1)]       # turn_wait(0), products, turn_pass(0)
                c1 += [("sync", s + 1), ("arrive", s)]       # turn_wait(1), products, turn_pass(1)
            c0.append(("sync", s))                            # consumer 0 takes the last hand-over
        if not skip_empty or n > 0:
            odd ^= 1
    return c0, c1


def bad_interleaving(blocks, skip_empty):
    """A description of the first bad interleaving found, or None."""
    progs = programs(blocks, skip_empty)
    seen = set()
    stack = [((0, 0), (None, None), ())]           # program counters, barrier each waits on, pending arrivals
    while stack:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        pcs, waiting, pending = state
        if all(pcs[c] == len(progs[c]) and waiting[c] is None for c in (0, 1)):
            if pending:                                 # a barrier left half-arrived (the next user's hang)
                bar, who = pending[0]
                return f"barrier {bar} left with an arrival of consumer {who[0]}"
            continue
        moved = False
        for c in (0, 1):
            if waiting[c] is not None or pcs[c] == len(progs[c]):
                continue
            op, bar = progs[c][pcs[c]]
            arrivals = dict(pending)
            who = arrivals.get(bar, ()) + (c,)
            wait = list(waiting)
            if len(who) == 2:                           # 256 arrivals: the barrier completes
                if who[0] == who[1]:
                    return f"barrier {bar} completed by consumer {c} alone"
                wait = [None if w == bar else w for w in wait]
                arrivals.pop(bar)
            else:
                arrivals[bar] = who
                if op == "sync":
                    wait[c] = bar
            pc = list(pcs)
            pc[c] += 1
            stack.append((tuple(pc), tuple(wait), tuple(sorted(arrivals.items()))))
            moved = True
        if not moved:
            return "no consumer can move"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", action="store_true", help="tiles with no KV block take turns too (the old protocol)")
    skip_empty = not ap.parse_args().before
    walks = [list(w) for n in range(1, 5) for w in itertools.product((0, 1, 2), repeat=n)]
    bad = [(w, why) for w in walks if (why := bad_interleaving(w, skip_empty))]
    print(f"{len(walks)} walks, {len(bad)} can hang" + (f"; e.g. KV blocks a tile {bad[0][0]}: {bad[0][1]}" if bad else ""))
    return 1 if bad and skip_empty else 0


if __name__ == "__main__":
    raise SystemExit(main())
