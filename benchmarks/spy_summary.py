"""Where a Python program's seconds went, from py-spy's collapsed stacks (`record -f raw`).

    python3 benchmarks/spy_summary.py spy.raw [--top 15] [--match runner/]

For each sampled process (py-spy's `--subprocesses` names it in a root frame "process PID:..."),
its share of the samples; the frames whose code matches `--match` that the most samples passed
through (inclusive; frames on every stack, such as the process's entry, are left out); then the
leaf frames that held the most (exclusive). Recorded with `--idle`, a process waiting on a
socket shows as the frame that waits, so the judge's time is split between its own work and
what it waited for. Made to find where the GPU test of kv_cache_append spends its 100 s
(`benchmarks/results/README.md`, `h100-3979ade`).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple


class Profile(NamedTuple):
    samples: int
    inclusive: Counter  # frame -> samples with the frame anywhere on the stack
    exclusive: Counter  # frame -> samples with the frame on top


def parse(lines) -> dict[str, Profile]:
    """Per process (the stack's root frame when it names one, else "all"), the frame counts."""
    samples: Counter = Counter()
    inclusive: dict[str, Counter] = defaultdict(Counter)
    exclusive: dict[str, Counter] = defaultdict(Counter)
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if " (" not in stack or not count.isdigit():  # every Python frame is "name (file:line)"
            continue
        frames = stack.split(";")
        process = frames.pop(0) if frames[0].startswith("process ") else "all"
        samples[process] += int(count)
        inclusive[process].update({frame: int(count) for frame in set(frames)})
        if frames:
            exclusive[process][frames[-1]] += int(count)
    return {name: Profile(n, inclusive[name], exclusive[name]) for name, n in samples.items()}


def report(profiles: dict[str, Profile], top: int, match: str) -> str:
    everything = sum(p.samples for p in profiles.values()) or 1
    out = []
    for name, prof in sorted(profiles.items(), key=lambda item: -item[1].samples):
        out.append(f"## {name[:160]}: {prof.samples} samples ({prof.samples / everything:.1%})")
        share = prof.samples or 1
        mine = [(f, n) for f, n in prof.inclusive.most_common()
                if match in f and n < prof.samples][:top]  # not the frames on every stack
        out += [f"  incl {n / share:6.1%}  {f}" for f, n in mine]
        out += [f"  self {n / share:6.1%}  {f}" for f, n in prof.exclusive.most_common(top)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--match", default="runner/", help="frames shown inclusively")
    args = parser.parse_args(argv)
    with args.raw.open() as lines:
        profiles = parse(lines)
    if not profiles:
        print(f"{args.raw}: no py-spy collapsed stacks in it (lines of 'frame;frame;... COUNT', "
              "as `py-spy record -f raw` writes)", file=sys.stderr)
        return 2
    print(report(profiles, args.top, args.match))
    return 0


if __name__ == "__main__":
    sys.exit(main())
