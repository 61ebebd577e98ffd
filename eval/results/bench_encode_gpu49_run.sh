#!/bin/bash
# Device run (session 49): encode throughput on the GPU, the code before (a10abff) and after the tokenize-once change, same machine.
# Locally: DEV=cpu SIZES=20 OUT=/tmp/out49 bash .gpu/t49/run.sh
set -o pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.." || exit 1
REPO=$PWD
DEV=${DEV:-cuda}; OUT=${OUT:-/tmp/out49}; SIZES=${SIZES:-300}; mkdir -p $OUT
ST=/tmp/st; [ -d $ST/site ] || { mkdir -p $ST && tar -xJf $REPO/.gpu/t49/stage.tar.xz -C $ST || exit 1; }
# Two propdex namespaces as pyproject maps them: this tree (new) and a10abff's code (old) with the same weights.
mkdir -p /tmp/new/propdex /tmp/old/src && cp -r propdex/* /tmp/new/propdex/ && for d in encoders indexer retriever eval; do ln -sfn "$REPO/$d" /tmp/new/propdex/$d; done
tar -xzf .gpu/t49/old.tar.gz -C /tmp/old/src && mkdir -p /tmp/old/propdex && cp -r /tmp/old/src/propdex/* /tmp/old/propdex/ && for d in encoders indexer retriever eval; do ln -sfn /tmp/old/src/$d /tmp/old/propdex/$d; done
ln -sfn "$REPO/encoders/weights" /tmp/old/src/encoders/weights
[ "$DEV" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
nproc | tee -a $OUT/gpu.txt
ENC=${ENC:-single,single:batch_size=256,tokens,proposition:context=passage:beside=1}
for v in ${ORDER:-old new old new}; do
  n=$(ls $OUT | grep -c "^log_$v")
  (cd /tmp/$v && PYTHONPATH=/tmp/$v${SITE-:$ST/site} timeout ${LIM:-200} python3 -m propdex -q bench --sections encode --scale-corpus $ST/data/wiki \
     --scale-sizes $SIZES --scale-encoders $ENC --device $DEV --out $OUT/encode_${v}_$n.json) > $OUT/log_${v}_$n.txt 2>&1
  echo "$v run $n rc=$?" | tee -a $OUT/summary.txt
  python3 -c "import json,sys; d=json.load(open('$OUT/encode_${v}_$n.json')); [print('$v', p['encoder'], p['documents'], p['passages'], p['encode_s'], p['encode_docs_per_s']) for p in d['encode']['points']]" 2>&1 | tee -a $OUT/summary.txt
  [ "$v" = new ] && [ -n "$ONCE" ] && break
done
