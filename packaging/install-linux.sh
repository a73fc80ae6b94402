#!/usr/bin/env bash
# Installs the built Chatterbox Studio (packaging/build.sh) for the current user, under ~/.local:
#   ~/.local/lib/chatterbox-studio/                        the app folder
#   ~/.local/bin/chatterbox-studio                         a symlink to its launcher
#   ~/.local/share/applications/chatterbox-studio.desktop  the menu entry
#   ~/.local/share/icons/hicolor/*/apps/chatterbox-studio.{png,svg}
#   ~/.local/share/mime/packages/chatterbox-studio.xml     the .voice.gguf and .gguf file types
#   ~/.config/mimeapps.list: .voice.gguf files open with Chatterbox Studio
# The menu entry declares what the app opens (models, voices, recordings and videos, text,
# Markdown, HTML and EPUB scripts): it is offered under "Open With" for each; only the voice
# type, ours alone, is made its default.
# Every file, folder and line it adds is listed in ~/.local/lib/chatterbox-studio/.install-manifest;
# uninstall-linux.sh removes exactly those. Installing again replaces the previous install.
#   bash packaging/install-linux.sh [--app DIR] [--force]   (DIR defaults to dist/chatterbox-studio)
# XDG_DATA_HOME and XDG_CONFIG_HOME are honoured; nothing needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$(dirname "$here")/dist/chatterbox-studio"
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --app) src=$2; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "install-linux.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
src=$(cd "$src" 2>/dev/null && pwd) || { echo "install-linux.sh: no built app at $src (run packaging/build.sh first)" >&2; exit 1; }
[ -x "$src/chatterbox-studio" ] || { echo "install-linux.sh: $src has no chatterbox-studio launcher (run packaging/build.sh)" >&2; exit 1; }
res="$src/_internal/resources"
[ -f "$res/chatterbox-studio.desktop" ] || { echo "install-linux.sh: $res lacks the bundled resources (rebuild the app)" >&2; exit 1; }

data="${XDG_DATA_HOME:-$HOME/.local/share}"
config="${XDG_CONFIG_HOME:-$HOME/.config}"
dest="$HOME/.local/lib/chatterbox-studio"
bin="$HOME/.local/bin"
link="$bin/chatterbox-studio"
manifest="$dest/.install-manifest"
desktop="$data/applications/chatterbox-studio.desktop"
mimeapps="$config/mimeapps.list"
assoc="application/x-chatterbox-voice=chatterbox-studio.desktop"

# Never overwrite what is not ours: a folder without our manifest, or a launcher that
# points elsewhere (e.g. a `pip install --user` console script).
if [ -e "$dest" ] && [ ! -f "$manifest" ]; then
  echo "install-linux.sh: $dest exists and is not a Chatterbox Studio install; move it away first" >&2; exit 1
fi
if { [ -e "$link" ] || [ -L "$link" ]; } && [ "$(readlink "$link")" != "$dest/chatterbox-studio" ] && [ "$force" = 0 ]; then
  echo "install-linux.sh: $link already exists and is not ours; remove it or pass --force" >&2; exit 1
fi
if [ -f "$manifest" ]; then
  echo "install-linux.sh: replacing the previous install"
  bash "$here/uninstall-linux.sh" --quiet
fi

# The files this install will place (besides the app folder).
icon_files=()
for png in "$res"/icons/chatterbox-studio-*.png; do
  size=${png##*-}; size=${size%.png}
  icon_files+=("$png=$data/icons/hicolor/${size}x${size}/apps/chatterbox-studio.png")
done
icon_files+=("$res/chatterbox-studio.svg=$data/icons/hicolor/scalable/apps/chatterbox-studio.svg")
mime_file="$data/mime/packages/chatterbox-studio.xml"

# Record, before creating anything, which folders do not exist yet: only those may go at uninstall.
entries=()
new_dirs() {
  local d
  d=$(dirname "$1")
  while [ ! -e "$d" ]; do entries+=("dir $d"); d=$(dirname "$d"); done
}
new_dirs "$dest/x"; new_dirs "$link"; new_dirs "$desktop"; new_dirs "$mime_file"; new_dirs "$mimeapps"
for pair in "${icon_files[@]}"; do new_dirs "${pair#*=}"; done
for f in "$mimeapps" "$data/applications/mimeinfo.cache"; do [ -e "$f" ] || entries+=("newfile $f"); done

echo "install-linux.sh: copying the app to $dest"
mkdir -p "$(dirname "$dest")"
rm -rf "$dest.partial"
cp -a "$src" "$dest.partial"
mv "$dest.partial" "$dest"

mkdir -p "$bin"
ln -sfn "$dest/chatterbox-studio" "$link"
entries+=("file $link")

# The menu entry runs the installed launcher by absolute path (~/.local/bin is not on
# every desktop session's PATH).
mkdir -p "$(dirname "$desktop")"
sed -e "s|^Exec=chatterbox-studio|Exec=$dest/chatterbox-studio|" \
    -e "s|^TryExec=chatterbox-studio|TryExec=$dest/chatterbox-studio|" \
    "$res/chatterbox-studio.desktop" > "$desktop"
chmod 0644 "$desktop"
entries+=("file $desktop")

for pair in "${icon_files[@]}" "$res/chatterbox-studio-mime.xml=$mime_file"; do
  mkdir -p "$(dirname "${pair#*=}")"
  install -m 0644 "${pair%%=*}" "${pair#*=}"
  entries+=("file ${pair#*=}")
done

# .voice.gguf files open with Chatterbox Studio (our own type, so no one else's default is replaced).
mkdir -p "$config"
if ! grep -qxF "$assoc" "$mimeapps" 2>/dev/null; then
  if grep -qxF '[Default Applications]' "$mimeapps" 2>/dev/null; then
    sed -i "/^\[Default Applications\]\$/a $assoc" "$mimeapps"
  else
    [ -s "$mimeapps" ] && [ -n "$(tail -c 1 "$mimeapps")" ] && echo >> "$mimeapps"
    printf '[Default Applications]\n' >> "$mimeapps"
    echo "$assoc" >> "$mimeapps"
    entries+=("header $mimeapps [Default Applications]")
  fi
  entries+=("line $mimeapps $assoc")
fi
entries+=("data $data")
printf '%s\n' "${entries[@]}" | awk '!seen[$0]++' > "$manifest"

# Refresh the desktop's caches where the tools exist (they are optional).
if command -v update-mime-database >/dev/null; then update-mime-database "$data/mime" >/dev/null 2>&1 || true; fi
if command -v update-desktop-database >/dev/null; then update-desktop-database -q "$data/applications" || true; fi
touch "$data/icons/hicolor"
if [ -f "$data/icons/hicolor/icon-theme.cache" ] && command -v gtk-update-icon-cache >/dev/null; then
  gtk-update-icon-cache -q -f -t "$data/icons/hicolor" || true
fi

echo "install-linux.sh: installed: menu entry, icon, file types (.voice.gguf, .gguf), .voice.gguf association; launcher $link"
case ":$PATH:" in *":$bin:"*) ;; *) echo "install-linux.sh: note: $bin is not on your PATH" ;; esac
