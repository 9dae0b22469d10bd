#!/bin/sh
# Line counts per module: tools/loc.sh [TREE]   (TREE: a git work tree, default this repository)
# Counts the tracked source files (.c .h .cu .cuh .py .sh .js) of each module: include/, every src/*
# folder (src/backend also split into cpu/ and cuda/), cli/, server/, tests/, bench/, tools/. Lines are `wc -l`
# (comments and blank lines included). Prints a Markdown table: module, files, lines.
set -e
tree=${1:-.}
git -C "$tree" rev-parse --git-dir >/dev/null
files=$(mktemp); trap 'rm -f "$files"' EXIT
git -C "$tree" ls-files | grep -E '\.(c|h|cu|cuh|py|sh|js)$' > "$files"
# row LABEL PATH-REGEX: one table row for the tracked files whose path matches the regex
row() {
    grep -E "$2" "$files" | (cd "$tree" && tr '\n' '\0' | xargs -0 -r wc -l) | awk -v m="$1" '
        $2 != "total" { n++; l += $1 } END { if (n) printf "| %s | %d | %d |\n", m, n, l }'
}
echo "| module | files | lines |"
echo "|---|---:|---:|"
row include '^include/'
for d in $(sed -n 's#^src/\([^/]*\)/.*#\1#p' "$files" | sort -u); do
    row "src/$d" "^src/$d/"
    [ "$d" = backend ] && { row "  src/backend/cpu" '^src/backend/cpu/'; row "  src/backend/cuda" '^src/backend/cuda/'; }
done
row 'src (all)' '^src/'
row cli '^cli/'
row server '^server/'
row tests '^tests/'
row bench '^bench/'
row tools '^tools/'
