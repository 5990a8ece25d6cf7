#!/usr/bin/env bash
# Prints the path of a working Python 3.10 interpreter, or explains and fails.
# TFX 1.16 (the newest whose whole stack installs here) supports only 3.10.
set -u
candidates=()
[ -n "${PYTHON310:-}" ] && candidates+=("$PYTHON310")
candidates+=(python3.10)
for dir in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10*/bin /usr/local/bin /usr/bin; do
  [ -x "$dir/python3.10" ] && candidates+=("$dir/python3.10")
done
for py in "${candidates[@]}"; do
  if "$py" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 10))' >/dev/null 2>&1; then
    command -v "$py"
    exit 0
  fi
done
echo "leantfx needs Python 3.10 (TFX 1.16 supports no other version) and none was found:" >&2
echo "tried ${candidates[*]}. Install it (e.g. 'pyenv install 3.10' or your OS package" >&2
echo "python3.10 with venv) or point PYTHON310=/path/to/python3.10 at one." >&2
exit 1
