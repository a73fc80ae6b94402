#!/usr/bin/env bash
# Removes what packaging/install-linux.sh installed for the current user: exactly the files,
# folders and mimeapps.list line listed in its manifest, and the app folder; then refreshes
# the desktop's caches. A folder goes only if the install created it and it is empty again
# (a shared-mime database generated from our file alone goes with it).
#   bash packaging/uninstall-linux.sh [--quiet]
set -euo pipefail
quiet=0
[ "${1:-}" = "--quiet" ] && quiet=1
say() { if [ "$quiet" = 0 ]; then echo "uninstall-linux.sh: $*"; fi; }
dest="$HOME/.local/lib/chatterbox-studio"
manifest="$dest/.install-manifest"
if [ ! -f "$manifest" ]; then
  say "Chatterbox Studio is not installed for this user (no $manifest)"
  exit 0
fi

data=""
dirs=()
newfiles=()
headers=()
while read -r kind a b; do
  case "$kind" in
    file) if [ -e "$a" ] || [ -L "$a" ]; then rm -f "$a"; say "removed $a"; fi ;;
    line) [ -f "$a" ] && { grep -vxF "$b" "$a" > "$a.tmp" || true; cat "$a.tmp" > "$a"; rm -f "$a.tmp"; say "removed '$b' from $a"; } ;;
    header) headers+=("$a"$'\t'"$b") ;;
    newfile) newfiles+=("$a") ;;
    dir) dirs+=("$a") ;;
    data) data=$a ;;
  esac
done < "$manifest"
for fh in "${headers[@]}"; do  # a group header we added goes when its group is empty again
  f=${fh%%$'\t'*}; h=${fh#*$'\t'}
  [ -f "$f" ] || continue
  awk -v h="$h" '{ l[NR] = $0 } END {
      for (i = 1; i <= NR; i++) {
        if (l[i] == h) { j = i + 1; while (j <= NR && l[j] ~ /^[ \t]*$/) j++; if (j > NR || l[j] ~ /^\[/) continue }
        print l[i] } }' "$f" > "$f.tmp"
  cat "$f.tmp" > "$f"; rm -f "$f.tmp"
done

rm -rf "$dest"
say "removed $dest"

# Refresh caches first, so a folder holding only our regenerated caches can be recognised.
if [ -n "$data" ]; then
  if [ -d "$data/mime" ] && command -v update-mime-database >/dev/null; then
    update-mime-database "$data/mime" >/dev/null 2>&1 || true
  fi
  if [ -d "$data/applications" ] && command -v update-desktop-database >/dev/null; then
    update-desktop-database -q "$data/applications" || true
  fi
  if [ -f "$data/icons/hicolor/icon-theme.cache" ] && command -v gtk-update-icon-cache >/dev/null; then
    gtk-update-icon-cache -q -f -t "$data/icons/hicolor" || true
  fi
fi

# Files the install created (mimeapps.list, the desktop's mimeinfo.cache) that hold no entry again.
for f in "${newfiles[@]}"; do
  if [ -f "$f" ] && ! grep -q '=' "$f"; then rm -f "$f"; say "removed $f"; fi
done

# Folders the install created, deepest first. A shared-mime database folder whose packages/
# is gone (ours was its only source) counts as empty: it was generated from our file.
[ ${#dirs[@]} -eq 0 ] || printf '%s\n' "${dirs[@]}" | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2- |
while IFS= read -r d; do
  [ -d "$d" ] || continue
  case "$d" in
    */mime) [ -e "$d/packages" ] || rm -rf "$d" ;;
  esac
  if [ -d "$d" ] && rmdir "$d" 2>/dev/null; then say "removed $d/"; fi
done
say "Chatterbox Studio is uninstalled"
