#!/usr/bin/env python3
"""Fills MANIFEST.json's measured fields from what sentier_opt does to each archive today.

For every module of MANIFEST.json and every archive kind written for it (scripted, traced) in
DIR (torch1.13/ by default), runs

  sentier_opt --input=DIR/<name>/<kind>.pt --inputs=DIR/<name>/inputs.pt --output=TMP --report=R

and records, per kind, under the entry's `sentier_opt`: the rules that fired (`rule_counts`),
the status sentier_opt gives the result (`optimized` or `unchanged`, and the reason when
unchanged), the matches legality refused (`rejected_by_legality`), and the aten ops per forward
and, where a rule fired, per training step before and after, as the report counts them; `expect_rules` (per kind) becomes the rules that fired. Hand-written fields
(`optimus_pass`, `spelling`, `description`, `negative`, `forbid_rules`, `gap`) are kept.

Usage (after `bazel build //tools:sentier_opt`):
  python3 testdata/optimus_conformance/measure.py --sentier_opt=bazel-bin/tools/sentier_opt
          [--dir=testdata/optimus_conformance/torch1.13] [--modules=a,b] [--check]

--check changes nothing: it exits 1 when a measured field differs from the manifest's (a rule
that no longer fires, or fires where it did not, an op count that moved), naming each one.
"""

import argparse
import json
import re
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def measure(sentier_opt: str, archive: str, inputs: str, tmp: str) -> dict:
    out = os.path.join(tmp, "out.pt")
    rep = os.path.join(tmp, "report.json")
    cmd = [sentier_opt, "--input=" + archive, "--inputs=" + inputs, "--output=" + out,
           "--report=" + rep]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), run.returncode, run.stdout))
    with open(rep) as f:
        report = json.load(f)
    got = {
        "status": report["status"],
        "rule_counts": {k: v for k, v in sorted(report.get("rule_counts", {}).items()) if v},
        "aten_ops_per_forward": [report["aten_ops_per_forward_before"],
                                 report["aten_ops_per_forward_after"]],
    }
    if "aten_ops_per_training_step_before" in report:  # counted where a rule fired
        got["aten_ops_per_training_step"] = [report["aten_ops_per_training_step_before"],
                                             report["aten_ops_per_training_step_after"]]
    refused = {k: v for k, v in sorted(report.get("rejected_by_legality", {}).items()) if v}
    if refused:
        got["rejected_by_legality"] = refused
    if report["status"] != "optimized":
        got["reason"] = report.get("reason", "")
        # Not published for growth: the rewritten graph's count is in the reason ("(104 vs 83)").
        grown = re.search(r"per training step \(forward and backward\) \((\d+) vs \d+\)",
                          got["reason"])
        if grown:
            got["aten_ops_per_training_step_rewritten"] = int(grown.group(1))
    return got


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentier_opt", required=True)
    parser.add_argument("--dir", default=os.path.join(HERE, "torch1.13"))
    parser.add_argument("--manifest", default=os.path.join(HERE, "MANIFEST.json"))
    parser.add_argument("--modules", default="")
    parser.add_argument("--check", action="store_true")
    opts = parser.parse_args(argv)
    with open(opts.manifest) as f:
        manifest = json.load(f)
    wanted = set(n for n in opts.modules.split(",") if n)
    differences = []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in manifest["models"]:
            name = entry["name"]
            if wanted and name not in wanted:
                continue
            measured = {}
            for kind in ("scripted", "traced"):
                archive = os.path.join(opts.dir, name, kind + ".pt")
                if not os.path.exists(archive):
                    continue
                measured[kind] = measure(opts.sentier_opt, archive,
                                         os.path.join(opts.dir, name, "inputs.pt"), tmp)
            expect = {k: sorted(v["rule_counts"]) for k, v in measured.items()}
            if opts.check:
                for key, value in (("sentier_opt", measured), ("expect_rules", expect)):
                    if entry.get(key) != value:
                        differences.append("%s: %s is %s, the manifest says %s" % (
                            name, key, json.dumps(value), json.dumps(entry.get(key))))
            else:
                entry["expect_rules"] = expect
                entry["sentier_opt"] = measured
            print("%-40s %s" % (name, "; ".join(
                "%s %s %s fwd %d->%d step %s%s" % (
                    k, v["status"], ",".join(v["rule_counts"]) or "-",
                    *v["aten_ops_per_forward"],
                    "->".join(map(str, v.get("aten_ops_per_training_step", ["-"]))),
                    " (%s)" % v["reason"][:150] if "reason" in v else "")
                for k, v in measured.items())))
    if opts.check:
        print("\n".join(differences))
        return 1 if differences else 0
    with open(opts.manifest, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
