#!/usr/bin/env python3
"""Samples a command's resident memory over its run, to see *when* its peak comes.

`/usr/bin/time` gives the peak RSS; where in the run it happens (during the evaluation, with
tasks still waiting, or at its end, with the model complete) decides which structures a
memory change must shrink. This runs the command and reads `/proc/PID/status` every few
milliseconds (Linux only), then prints about 40 evenly spaced samples and the peak:

    benches/rss-trace.py target/release/weft run model.weft -j1

Each line: seconds since the start, resident MB. The sampling costs the command nothing but
a little CPU on another core.
"""
import subprocess
import sys
import time

INTERVAL = 0.005


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.time()
    samples = []
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        samples.append((time.time() - start, int(line.split()[1]) / 1024))
        except OSError:
            pass
        time.sleep(INTERVAL)
    if not samples:
        print("the command ended before a sample was taken", file=sys.stderr)
        return 1
    step = max(1, len(samples) // 40)
    for at, mb in samples[::step]:
        print(f"{at:.3f} {mb:.1f}")
    at, mb = max(samples, key=lambda sample: sample[1])
    print(f"peak {mb:.1f} MB at {at:.3f} s (exit status {child.returncode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
