#!/usr/bin/env bash
# A real browser against the local speech server: headless Chromium opens a page served on
# another local port (and one under a name resolved to 127.0.0.1, as after DNS rebinding) whose
# script calls the API the ways a hostile page would. Prints what the page saw, what the server
# logged and how many requests it served.
#
#   bash scripts/server_cross_origin_check.sh MODEL.gguf
#
# Expected: every call from the foreign page fails (the server answers 403 without CORS headers,
# so the browser rejects the fetch and the no-cors POST is never spoken; served stays 0), and
# with --cors-origin naming the page's origin the same page gets its audio (the control).
# Needs chromium (`apt install chromium`) and the server extra.
set -euo pipefail
MODEL=${1:?usage: $0 MODEL.gguf}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
CHROMIUM=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$CHROMIUM" ] || { echo "chromium is not installed (apt install chromium)"; exit 1; }
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
API=$(free_port)
PAGE=$(free_port)

start_server() {  # extra serve options...
  "$PY" -c 'import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))' serve -m "$MODEL" --port "$API" --voices "$WORK" "$@" >"$WORK/server.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$API/health" >/dev/null && return 0
    sleep 0.2
  done
  echo "the server did not start:"; cat "$WORK/server.log"; exit 1
}
stop_server() { kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true; unset 'PIDS[-1]'; }
served() { curl -s "http://127.0.0.1:$API/health" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["served"])'; }

cat >"$WORK/page.html" <<EOF
<!doctype html><html><body><pre id="out"></pre><script>
const out = document.getElementById('out');
const say = (s) => { out.textContent += s + '\n'; };
const speech = JSON.stringify({model: 'tts-1', voice: 'default', input: 'Hello from another page.',
  response_format: 'pcm', seed: 1, max_tokens: 4, cfm_steps: 1, prompt_seconds: 1});
async function probe(label, url, init) {
  try {
    const r = await fetch(url, init);
    if (r.type === 'opaque') { say(label + ': sent, answer unreadable (opaque no-cors response)'); return; }
    const b = await r.arrayBuffer();
    say(label + ': status ' + r.status + ', ' + b.byteLength + ' bytes (' + r.type + ' response)');
  } catch (e) { say(label + ': fetch failed (' + e + ')'); }
}
(async () => {
  const api = 'http://' + location.hostname + ':$API';
  say('page origin ' + location.origin + ', API ' + api);
  await probe('POST text/plain (no-cors, the simple request)', api + '/v1/audio/speech',
              {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body: speech});
  await probe('POST application/json (cors, preflighted)', api + '/v1/audio/speech',
              {method: 'POST', headers: {'Content-Type': 'application/json'}, body: speech});
  await probe('GET /v1/models (cors)', api + '/v1/models', {});
  say('DONE');
})();
</script></body></html>
EOF
"$PY" -m http.server "$PAGE" --bind 127.0.0.1 --directory "$WORK" >"$WORK/page.log" 2>&1 &
PIDS+=($!)
sleep 1

browse() {  # URL
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
    --host-resolver-rules="MAP attacker.test 127.0.0.1" --virtual-time-budget=30000 \
    --dump-dom "$1" 2>/dev/null | sed -n '/<pre id="out">/,/<\/pre>/p' | sed 's/<[^>]*>//g' | sed '/^$/d'
}

echo "== server with defaults (no --cors-origin)"
start_server
echo "-- page on another local port: http://127.0.0.1:$PAGE/page.html"
browse "http://127.0.0.1:$PAGE/page.html"
echo "-- page under a name resolved to 127.0.0.1 (DNS rebinding): http://attacker.test:$PAGE/page.html"
browse "http://attacker.test:$PAGE/page.html"
echo "-- a rebound same-origin request (Host and Origin attacker.test:$API), by curl"
curl -s -o /dev/stdout -w ' -> HTTP %{http_code}\n' -H "Host: attacker.test:$API" -H "Origin: http://attacker.test:$API" \
  -H 'Content-Type: text/plain' --data "{\"model\":\"tts-1\",\"voice\":\"default\",\"input\":\"Hi.\"}" \
  "http://127.0.0.1:$API/v1/audio/speech"
echo "-- server log (refusals)"
grep -E "refused" "$WORK/server.log" || true
echo "-- requests served (speech made): $(served)"
stop_server

echo
echo "== control: server with --cors-origin http://127.0.0.1:$PAGE"
start_server --cors-origin "http://127.0.0.1:$PAGE"
browse "http://127.0.0.1:$PAGE/page.html"
echo "-- requests served (speech made): $(served)"
stop_server
