#!/bin/sh
# The built-in model's corpus, from Debian packages only: downloads them (apt-get download, and the English
# package descriptions through `apt-get update` with Acquire::Languages=en), unpacks them under WORK and
# writes plain text per domain and split to WORK/text (models/recipe/corpus_text.py; sizes and licences in
# WORK/text/manifest.json). Usage: models/recipe/build_corpus.sh [WORK=/tmp/bs-corpus]
set -eu
WORK=${1:-/tmp/bs-corpus}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK/debs" "$WORK/root"
PKGS="linux-source-6.1 sword-text-web r-cran-janeaustenr fortunes jargon-text"
command -v lz4cat >/dev/null || apt-get install -y -qq lz4 xz-utils
apt-get -qq -o Acquire::Languages=en update
(cd "$WORK/debs" && apt-get download $PKGS)
for f in "$WORK"/debs/*.deb; do dpkg -x "$f" "$WORK/root"; done
for f in /var/lib/apt/lists/*_main_i18n_Translation-en.lz4; do lz4cat "$f"; echo; done > "$WORK/root/Translation-en"
python3 "$HERE/corpus_text.py" "$WORK/root" "$WORK/text"
ls -l "$WORK/text"
