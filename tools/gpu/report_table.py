#!/usr/bin/env python3
"""report_table.py — one markdown table of what sentierd published, read from its report.json files.

    python3 tools/gpu/report_table.py OUTPUT_DIR TABLE.md

OUTPUT_DIR is sentierd's --output (OUTPUT_DIR/<model>/<version>/report.json). One row per version:
status, the decision's clause, the memory policy's clause, the judged step's times and peaks as
validation (or, where the original was kept, the gate) measured them, CUDA kernels per training
step, the job's seconds, whether the decision was reused, and why validation timed the original
again where it did. Each version's reason and its job's larger stages are printed as well.
"""
import glob
import json
import os
import sys


def figure(d, key, scale=1.0):
    v = d.get(key)
    return "%.2f" % (v / scale) if isinstance(v, (int, float)) and v >= 0 else "-"


def row(model, version, r):
    val = r.get("validation", {})
    step = "training_step" if "training_step_ms" in val else "forward"
    ms = val.get(step + "_ms", {})
    peak = val.get(step + "_peak_bytes", {})
    kernels = val.get("cuda_kernels_per_training_step", {})
    sel = r.get("selection", {})
    if not ms and sel:
        ms = {"reference": sel.get("original_ms"), "candidate": sel.get("optimized_ms")}
        peak = {"reference": sel.get("original_peak_bytes"), "candidate": sel.get("optimized_peak_bytes")}
    speedup = "-"
    if all(isinstance(ms.get(k), (int, float)) and ms.get(k) > 0 for k in ("reference", "candidate")):
        speedup = "%.2fx" % (ms["reference"] / ms["candidate"])
    timings = r.get("timings_ms", {})
    job_s = sum(timings.get(k, 0) for k in ("load", "select", "optimize", "save", "validate")) / 1000
    reuse = r.get("decision_reuse", {})
    return "| %s | %s | %s | %s | %s | %s -> %s (%s) | %s -> %s | %s -> %s | %.1f | %s | %s |" % (
        model, version, r.get("status"), r.get("decision"), r.get("memory_policy", {}).get("clause", "-"),
        figure(ms, "reference"), figure(ms, "candidate"), speedup,
        figure(peak, "reference", 1048576), figure(peak, "candidate", 1048576),
        kernels.get("reference", "-"), kernels.get("candidate", "-"), job_s,
        "from v%s" % reuse["from_version"] if reuse.get("reused") else "-",
        val.get("reference_retimed", "-")[:80])


def main(root, md):
    rows = ["| model | v | status | decision | memory clause | judged step ms ref -> cand | "
            "peak MiB ref -> cand | CUDA kernels/step ref -> cand | job s | reused | original re-timed |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(glob.glob(os.path.join(root, "*", "*", "report.json"))):
        model, version = path.split(os.sep)[-3:-1]
        r = json.load(open(path))
        rows.append(row(model, version, r))
        print("%s/%s: %s" % (model, version, r.get("reason", "")[:300]))
        t = r.get("timings_ms", {})
        print("  time (s): " + ", ".join("%s %.1f" % (k, t[k] / 1000) for k in sorted(t)
                                          if not k.startswith("optimize.") and t[k] >= 50))
    open(md, "w").write("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: report_table.py OUTPUT_DIR TABLE.md")
    main(sys.argv[1], sys.argv[2])
