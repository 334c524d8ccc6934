#!/usr/bin/env bash
# tools/gpu/run.sh PROFILE: every table row's gpu plan at once on one GPU.
#   PROFILE: cpu-tiny (this CPU, tiny models, for the tests) | smoke (GPU, a few updates, < 2 min)
#            | full (GPU, the plans in projects/*/table.json, < 9 min)
# Needs the bundle (make gpu-bundle) and OUT, the folder whose files come back. Optional:
#   GPU_BUNDLE (default .gpu), GPU_SCRATCH (default ~/parlai-empathy-gpu), GPU_ROWS
#   (project/row,...; default every row), GPU_PYTHON (default python3: the one that has torch),
#   GPU_MPNET_PIECES (a folder holding every float16 piece of all-mpnet-base-v2: joined and used),
#   GPU_SECONDS (the deadline instead of the profile's), GPU_TRAIN_ARGS (added to every train_model),
#   GPU_TRAIN_ROWS (project/row,...: GPU_TRAIN_ARGS go to these rows only),
#   GPU_EVAL_WORKERS (each evaluation sharded over this many processes),
#   GPU_WEIGHTS (project/row,...: their trained models come back in float16 pieces, model_pieces.py).
# An environment is made in the scratch folder from GPU_PYTHON (its packages stay visible) with the
# bundle's wheels installed into it, once per bundle; a second run (full after smoke) reuses it.
set -euo pipefail
started=$(date +%s)
profile=${1:?usage: tools/gpu/run.sh cpu-tiny|smoke|full}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bundle=${GPU_BUNDLE:-$repo/.gpu}
scratch=${GPU_SCRATCH:-$HOME/parlai-empathy-gpu}  # under ~: the evidence names its paths ~/...
image_python=${GPU_PYTHON:-python3}
: "${OUT:?set OUT: the folder whose files come back}"
[ -f "$bundle/MANIFEST.json" ] || { echo "no bundle at $bundle: run make gpu-bundle first" >&2; exit 2; }

env_dir=$scratch/env
if ! cmp -s "$bundle/MANIFEST.json" "$env_dir/.installed" 2>/dev/null; then
  echo "[run.sh] making $env_dir from $image_python and the bundle's wheels"
  rm -rf "$env_dir"
  "$image_python" -m venv --without-pip "$env_dir"
  # the image's packages (torch, transformers, ...) stay visible: its site folders are added, with
  # their .pth files, after the environment's own (which hold the bundle's wheels and our start-up hook)
  site=$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$image_python" - > "$site/_gpu_image.pth" <<'PY'
import sys
for path in sys.path:
    if path.endswith(('site-packages', 'dist-packages')):
        print(f'import site; site.addsitedir({path!r})')
PY
  "$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
    --ignore-installed --no-compile "$bundle"/wheels/*.whl
  cp "$bundle/MANIFEST.json" "$env_dir/.installed"
  rm -f "$env_dir/.code"
fi
# the package itself from the checkout that came with this command, once per state of its code: the
# bundle's wheel holds the code as it was when the bundle was built, which may lag the checkout
code=$( (cd "$repo" && find setup.py MANIFEST.in parlai_empathy_compat.pth parlai_empathy agents tasks zoo \
          -type f ! -path '*__pycache__*' 2>/dev/null || true) | LC_ALL=C sort \
       | (cd "$repo" && xargs -r sha256sum) | sha256sum | cut -c1-16)
if [ "$(cat "$env_dir/.code" 2>/dev/null)" != "$code" ]; then
  echo "[run.sh] installing parlai-empathy from $repo (code $code)"
  # build/ is emptied first (an earlier build's modules must not come back), and the build runs
  # under the lock the Makefile's reinstall and the tests' wheel builds take (where flock exists),
  # so that no two builds share the checkout's build/ at once
  lock=()
  command -v flock >/dev/null && lock=(flock /tmp/parlai-empathy-install.lock)
  "${lock[@]}" bash -c 'rm -rf "$1/build" && "$2" -m pip install --quiet --disable-pip-version-check --no-index \
    --no-deps --no-build-isolation --force-reinstall --no-compile "$1"' install "$repo" "$env_dir/bin/python"
  echo "$code" > "$env_dir/.code"
fi
echo "[run.sh] environment ready after $(( $(date +%s) - started )) s"
rows_arg=()
[ -n "${GPU_ROWS:-}" ] && rows_arg=(--rows "$GPU_ROWS")
[ -n "${GPU_MPNET_PIECES:-}" ] && rows_arg+=(--mpnet-pieces "$GPU_MPNET_PIECES")
[ -n "${GPU_SECONDS:-}" ] && rows_arg+=(--seconds "$GPU_SECONDS")
[ -n "${GPU_TRAIN_ARGS:-}" ] && rows_arg+=(--train-args "$GPU_TRAIN_ARGS")
[ -n "${GPU_TRAIN_ROWS:-}" ] && rows_arg+=(--train-rows "$GPU_TRAIN_ROWS")
[ -n "${GPU_EVAL_WORKERS:-}" ] && rows_arg+=(--eval-workers "$GPU_EVAL_WORKERS")
[ -n "${GPU_WEIGHTS:-}" ] && rows_arg+=(--weights "$GPU_WEIGHTS")
exec "$env_dir/bin/python" "$here/runbook.py" "$profile" --bundle "$bundle" --scratch "$scratch" --out "$OUT" \
  --repo "$repo" --started "$started" ${rows_arg[@]+"${rows_arg[@]}"}
