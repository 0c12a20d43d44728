#!/usr/bin/env python3
"""README's backend table against the backends themselves (issue 39): for each built-in backend,
`cgrt check CONF --dry-run` prints the backend's own "replay key: ..." line(s) and what each
phase's steps get ("train steps run with graphs ..."); the README row of that backend must carry
each replay key verbatim and the same words per phase. Standard library only (ctest label unit).

    backend_table.py CGRT_BINARY README.md CONF_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

# the configurations each backend is checked under (more than one where describe differs): a
# shipped file, and keys to set in it (a key not in the file is added under its section)
CONFIGS = {
    "none": [("none.ini", {})],
    "local": [("local.ini", {}), ("local_block.ini", {})],
    "transformer_engine": [("transformer_engine.ini", {})],
    "full_iteration": [("full_iteration.ini", {})],
    "dynamic_cp": [
        ("dynamic_cp.ini", {}),
        ("dynamic_cp.ini", {("dynamic_cp", "graph_scope"): "step", ("cuda_graph", "modules"): "",
                            ("host", "nan_check"): "off"}),
    ],
}
PHASES = ["train", "eval", "infer"]


def table_rows(readme):
    rows = {}
    text = open(readme, encoding="utf-8").read()
    start = text.index("| backend | when it captures |")
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def dry_run(cgrt, conf_dir, conf, keys_set):
    path = os.path.join(conf_dir, conf)
    tmp = None
    if keys_set:
        text = open(path, encoding="utf-8").read()
        for (section, key), value in keys_set.items():
            text, n = re.subn(rf"^{key}\s*=.*$", f"{key} = {value}", text, flags=re.M)
            if n == 0:
                if f"[{section}]" not in text:
                    text += f"\n[{section}]\n"
                text = text.replace(f"[{section}]", f"[{section}]\n{key} = {value}", 1)
        fd, tmp = tempfile.mkstemp(suffix=".ini")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        path = tmp
    try:
        p = subprocess.run([cgrt, "check", path, "--dry-run"], capture_output=True, text=True)
    finally:
        if tmp:
            os.unlink(tmp)
    if p.returncode != 0:
        sys.exit(f"cgrt check {conf} {keys_set} --dry-run exited {p.returncode}:\n"
                 f"{p.stdout}{p.stderr}")
    keys = re.findall(r"^\s*replay key: (.*)$", p.stdout, re.M)
    phases = {}
    for ph, how in re.findall(r"^\s*(train|eval|infer) steps (run [^(:]*)", p.stdout, re.M):
        phases[ph] = how.strip()
    return keys, phases


def main():
    cgrt, readme, conf_dir = sys.argv[1:4]
    rows = table_rows(readme)
    failures = 0
    for backend, confs in CONFIGS.items():
        row = rows.get(backend)
        if row is None:
            print(f"FAILED: README's backend table has no row for {backend}")
            failures += 1
            continue
        key_cell, phase_cells = row[3], {"train": row[4], "eval": row[4], "infer": row[5]}
        for conf, keys_set in confs:
            keys, phases = dry_run(cgrt, conf_dir, conf, keys_set)
            if not keys:
                print(f"FAILED: {backend} ({conf}): describe prints no 'replay key:' line")
                failures += 1
            for k in keys:
                if k not in key_cell:
                    print(f"FAILED: {backend} ({conf}): README's replay key '{key_cell}' lacks "
                          f"the backend's own '{k}'")
                    failures += 1
            for ph in PHASES:
                if phases.get(ph) != phase_cells[ph]:
                    print(f"FAILED: {backend} ({conf}): {ph} steps '{phases.get(ph)}' by the "
                          f"dry run, '{phase_cells[ph]}' in README")
                    failures += 1
        print(f"{backend}: the README row matches the backend "
              f"({', '.join(c + (' with ' + str(k) if k else '') for c, k in confs)})")
    print(f"{len(CONFIGS) - min(failures, len(CONFIGS))} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
