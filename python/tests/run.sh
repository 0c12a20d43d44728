#!/bin/sh
# Runs the Python package's tests (ctest calls it): `unit` runs python/tests on the host driver with
# pytest; `gpu` runs python/tests/gpu (cgrt.torch against eager PyTorch), which needs torch and a
# CUDA device and skips (exit 77, reason printed) without them. CGRT_PYTHON picks the interpreter;
# otherwise the first of python3 and /usr/bin/python3 that has what the label needs.
set -u
label=${1:-unit}
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(dirname "$here")
export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}"

pick() { # the first interpreter that can import the modules named
  for c in ${CGRT_PYTHON:-} python3 /usr/bin/python3; do
    command -v "$c" >/dev/null 2>&1 || continue
    "$c" -c "import $1" >/dev/null 2>&1 && { echo "$c"; return 0; }
  done
  return 1
}

# pytest exits 5 when it collected no test: for us that is a failure, never a pass.
pytest_run() {
  "$@"
  rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "FAILED: pytest collected no tests"
    return 1
  fi
  return "$rc"
}

if [ "$label" = unit ]; then
  py=$(pick pytest) || {
    echo "SKIPPED: no python3 with pytest found (apt-get install python3 python3-pytest)"
    exit 77
  }
  pytest_run "$py" -m pytest -q -rs -p no:cacheprovider --ignore="$here/gpu" "$here"
  exit $?
fi

py=$(pick torch) || {
  echo "SKIPPED: no python3 that can import torch; the cgrt.torch GPU tests did not run"
  exit 77
}
why=$("$py" -c 'import torch
print("" if torch.cuda.is_available() else "torch " + torch.__version__ + " sees no CUDA device")' 2>&1)
if [ -n "$why" ]; then
  echo "SKIPPED: $why; the cgrt.torch GPU tests did not run"
  exit 77
fi
if "$py" -c "import pytest" >/dev/null 2>&1; then
  pytest_run "$py" -m pytest -q -rs -p no:cacheprovider "$here/gpu"
  exit $?
fi
# No pytest beside torch: the test file runs its tests itself.
exec "$py" "$here/gpu/test_torch.py"
