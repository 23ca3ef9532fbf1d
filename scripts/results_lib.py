"""Shared by the results reports (localsgd-report, stragglers-report): results files of JSON
lines tagged with "run", "sim_time_s" and "tokens"."""
import json
import subprocess
import tempfile
from collections import defaultdict


def load(path):
    runs = defaultdict(list)
    for line in open(path):
        j = json.loads(line)
        runs[j["run"]].append(j)
    return runs


def val_points(lines):
    """(simulated s, tokens, validation loss) of each validation; step 0 has trained nothing."""
    return [(j["sim_time_s"], j["tokens"] if j["step"] else j.get("tokens", 0), j["val_loss"])
            for j in lines if "val_loss" in j]


def time_to_reach(points, target):
    """Simulated time at which validation loss first reaches target (linear between evals)."""
    for (t0, _, v0), (t1, _, v1) in zip(points, points[1:]):
        if v1 <= target:
            return t0 + (t1 - t0) * (v0 - target) / (v0 - v1) if v0 > target else t0
    return None


def plot(runs, prefix, column, xlabel, name):
    with tempfile.TemporaryDirectory() as d:
        plots = []
        for run, lines in runs.items():
            pts = val_points(lines)
            if not pts:
                continue
            f = f"{d}/{run}.dat"
            with open(f, "w") as out:
                for p in pts:
                    out.write(f"{p[column]} {p[2]}\n")
            plots.append(f"'{f}' using 1:2 with linespoints title '{run}'")
        script = (f"set terminal pngcairo size 800,500; set output '{prefix}-{name}.png';"
                  f"set xlabel '{xlabel}'; set ylabel 'validation loss'; set grid;"
                  "plot " + ", ".join(plots))
        subprocess.run(["gnuplot", "-e", script], check=True)
    print(f"plot: {prefix}-{name}.png")
