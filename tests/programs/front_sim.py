"""A stand-in simulator for the command evaluator's tests, run as a separate program.

Reads candidates with columns x (in [0, 1]) and y (an integer) as CSV or JSON, from stdin or
a file, and writes f1 = x and f2 = 1 - sqrt(x) + y / 10 for each, in order: the Pareto front
is every x with y = 0. Candidates with y = 4 and x > 0.5 are infeasible ("too hot"). A chunk
holding y = 13 makes the program fail (exit code 3, a message on stderr); a chunk holding
y = 99 makes it hang; y = 77 makes it append its process id to the file named by
FRONT_SIM_PIDS and then hang.

usage: front_sim.py csv|json [INPUT OUTPUT]   (without files: stdin to stdout)
"""

import csv
import io
import json
import math
import os
import sys
import time


def main() -> None:
    fmt = sys.argv[1]
    text = open(sys.argv[2]).read() if len(sys.argv) > 2 else sys.stdin.read()
    rows = list(csv.DictReader(io.StringIO(text))) if fmt == "csv" else json.loads(text)
    print(f"front_sim: {len(rows)} candidates", file=sys.stderr)  # noise a simulator makes
    out = []
    for row in rows:
        x, y = float(row["x"]), int(float(row["y"]))
        if y == 13:
            print(f"front_sim: cannot simulate y={y} at x={x}", file=sys.stderr)
            sys.exit(3)
        if y == 99:
            time.sleep(60)
        if y == 77:
            with open(os.environ["FRONT_SIM_PIDS"], "a") as f:
                f.write(f"{os.getpid()}\n")
            time.sleep(120)
        hot = y == 4 and x > 0.5
        out.append(
            {
                "f1": x,
                "f2": 1 - math.sqrt(x) + y / 10,
                "feasible": not hot,
                "reason": "too hot" if hot else "",
            }
        )
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=["f1", "f2", "feasible", "reason"])
        writer.writeheader()
        writer.writerows(out)
        result = buf.getvalue()
    else:
        result = json.dumps(out)
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            f.write(result)
    else:
        sys.stdout.write(result)


if __name__ == "__main__":
    main()
