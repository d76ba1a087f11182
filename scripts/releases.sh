#!/usr/bin/env bash
# scripts/releases.sh COMMAND: what the release scripts read from
# releases.txt and CHANGELOG.md (docs/RELEASING.md).
#
#   last              the last release point: "VERSION COMMIT"
#   modules           the released modules' directories (every go.mod
#                     outside tools/ and testdata/), "." first
#   paths             their module paths, in the same order
#   section NAME      exit 0 if CHANGELOG.md has a section "## [NAME]"
#   breaking NAME [PKG...]
#                     exit 0 if that section has a "### Breaking" heading
#                     with at least one entry ("- ...") under it, and
#                     its entries name each PKG (a package path relative
#                     to the repository root, such as lease or
#                     integration/etcdtest) in backquotes; prints the
#                     packages none names
set -euo pipefail
cd "$(dirname "$0")/.."

# section_text NAME: the lines of CHANGELOG.md's section NAME, without
# its heading, up to the next "## " heading.
section_text() {
  awk -v name="$1" '
    /^## \[/ { insec = (index($0, "## [" name "]") == 1); next }
    insec { print }
  ' CHANGELOG.md
}

case ${1:-} in
last)
  [[ -f releases.txt ]] || exit 1
  grep -Ev '^[[:space:]]*(#|$)' releases.txt | tail -1 | awk 'NF == 2 { print $1, $2; ok = 1 } END { exit !ok }'
  ;;
modules)
  find . -name go.mod -not -path './tools/*' -not -path '*/testdata/*' -printf '%h\n' | sed 's|^\./||' | sort
  ;;
paths)
  for d in $("$0" modules); do sed -n 's/^module //p' "$d/go.mod"; done
  ;;
section)
  grep -q "^## \[$2\]" CHANGELOG.md
  ;;
breaking)
  entries=$(section_text "$2" | awk '
    /^### / { inb = ($0 ~ /^### Breaking[[:space:]]*$/); next }
    inb { print }
  ')
  grep -q '^- ' <<<"$entries" || exit 1
  missing=0
  for pkg in "${@:3}"; do
    if ! grep -qF "\`$pkg\`" <<<"$entries"; then
      echo "$pkg"
      missing=1
    fi
  done
  exit "$missing"
  ;;
*)
  sed -n '2,12p' "$0" >&2
  exit 2
  ;;
esac
