#!/usr/bin/env bash
# The GPU machine's run (the device tool): build the engine with CUDA for this GPU, then
# the GPU tests and the benchmarks, every log under $OUT. Run from the folder that holds
#   src/      this repository's files          ggml/  the pinned ggml tree (or ggml.tar.xz here or
#             in ..: unpacked to ggml/; the tree without examples, tests and unused backends is 0.7 MB)
#   cpu/      CPU backend modules built elsewhere (every x86-64 variant; optional)
#   vulkan/   libggml-vulkan.so.xz built elsewhere (optional)   ../.gl/  Vulkan loader debs
#   cuda/     cuda.xz.* (an earlier run's $OUT: its CUDA module, xz, split; optional: skips
#             the 4-minute CUDA build, the same ggml source assumed)
#   whl/      wheels missing there (gguf)      turbo.skel.gguf[.xz] (benchmarks/model_skeleton.py)
#   perth.skel.gguf[.xz]  the watermark model's skeleton (model_skeleton.py pack of the suite's perth.gguf)
#   refwhl/   with REF=1: chatterbox-tts and the wheels the image lacks for it (no resemble-perth:
#             34 MB of watermarker weights that the bench never runs; a pass-through stands in)
#   refsite.tar.xz  instead of refwhl/: the same wheels unpacked and packed again with xz
#             (19 MB of wheels -> 8 MB, which leaves room for vulkan/ in the 64 MiB)
# REF=1: the PyTorch reference on the same weights: a random snapshot is built there
# (tests/reference, torch, while the engine builds) and converted into the F32 GGUF every
# step uses (instead of the skeleton); the pairs in REF_BENCH run `bench --reference` (torch
# on CUDA for a CUDA device, in the same process run as ours).
# VARIANT=mtl (default turbo): the Multilingual model (needs REF=1: no skeleton); its tests are
# test_backend_gpu_mtl.py. BENCH_ARGS: more `bench` arguments (e.g. "--tokens 100 --language en").
# The device tool carries 64 MiB at most: with the CUDA module (37 MB as xz) carry the
# skeleton as .xz (17 MB) and leave out cpu/, vulkan/ and app/qt; keep ggml's CUDA sources
# (patches/ touch them and every patch must apply, also for a CPU-only build). ggml/ must be
# a real folder, not a symbolic link (cmake copies it to patch it, and copies a link as a link).
# BENCH pairs are device/quant[/tokens].
# mtl.skel.gguf.xz: a Multilingual skeleton, unpacked to $M/mtl-f32.gguf (CBS_TEST_MTL_MODEL for the tests).
# STREAMS_REPLICAS: the replica counts bench_streams runs (default 1); SERVER_REPLICAS the server's.
# STAGES (default "build tests bench"; also "streams": benchmarks/bench_streams.py, after bench; also "probe": benchmarks/gpu_probe.py for PROBE's
# device/quant pairs, then the same with --profile and CBS_PROFILE_OPS=1: time by operation
# kind, profile.txt) picks what runs, BENCH the device/quant pairs,
# TESTS_K one pytest -k selection (default: "not greedy", then "greedy"), TESTS_REPEAT how many times (1),
# TESTS_FILE another test file (CBS_TEST_MODEL is the F32 model; TESTS_Q4=1 adds CBS_TEST_MODEL_Q4, the Q4_0 one),
# BENCH_TIMEOUT each bench's limit (150 s); tests, then probe, then bench run.
# DEADLINE (s after T0, a date +%s) skips benchmarks started later; a build, models left by an earlier run on
# the same machine are reused.
set -u
here=$(pwd)
for t in ggml.tar.xz ../ggml.tar.xz; do [ ! -d ggml ] && [ -f "$t" ] && tar -xJf "$t"; done
OUT=${OUT:-$here/out}
mkdir -p "$OUT"
B=/tmp/cbs-build
M=/tmp/cbs-models
stages=${STAGES:-build tests bench}
V=${VARIANT:-turbo}
log() { echo "[$(date +%T) +$SECONDS s] $*" | tee -a "$OUT/steps.log"; }

log "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1); $(nproc) cores"
for f in ${GL_DIR:-../.gl}/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done
ldconfig 2>/dev/null
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site whl/*.whl \
  $(ls refwhl/*.whl 2>/dev/null) && export PYTHONPATH=/tmp/site
[ -f refsite.tar.xz ] && tar -C /tmp/site -xJf refsite.tar.xz
if [ -n "${REF:-}" ] && ! ls refwhl/resemble_perth-*.whl > /dev/null 2>&1; then
  mkdir -p /tmp/site/perth
  printf '%s\n' '"""Stand-in for resemble-perth (not carried): generate()s watermark, never timed by the bench."""' \
    'class PerthImplicitWatermarker:' '    def apply_watermark(self, wav, sample_rate):' '        return wav' \
    > /tmp/site/perth/__init__.py
fi
export PYTHONUNBUFFERED=1

mkdir -p $M
SNAP=/tmp/cbs-snap
if [ -n "${REF:-}" ]; then
  # The reference's random snapshot (torch, CPU), while the engine builds; converted below.
  if [ ! -s $M/$V-f32.gguf ] && [ ! -s $SNAP/reference_snapshot.json ]; then
    (cd src && rm -rf $SNAP && CBS_REF_INNER=1 HF_HUB_OFFLINE=1 python3 -m tests.reference snapshot --variant $V \
       --out $SNAP >> "$OUT/steps.log" 2>&1) &
    snap_pid=$!
  fi
elif [ ! -s $M/$V-f32.gguf ] && [ "$V" = turbo ]; then
  # The random-weight model, F32, while the engine builds (gguf + numpy only).
  [ -f turbo.skel.gguf.xz ] && [ ! -f turbo.skel.gguf ] && xz -dk turbo.skel.gguf.xz
  (python3 src/benchmarks/model_skeleton.py unpack turbo.skel.gguf $M/turbo-f32.gguf >> "$OUT/steps.log" 2>&1) &
  model_pid=$!
fi
if [ -f mtl.skel.gguf.xz ] && [ ! -s $M/mtl-f32.gguf ]; then
  # A Multilingual skeleton (e.g. the small test model's) for test_t3_batch.py's llama step there.
  (xz -dc mtl.skel.gguf.xz > mtl.skel.gguf && python3 src/benchmarks/model_skeleton.py unpack mtl.skel.gguf \
     $M/mtl-f32.gguf >> "$OUT/steps.log" 2>&1) &
  mtl_pid=$!
fi

gpu=${BUILD_GPU:-cuda}  # what this machine builds (none: only the carried modules' GPUs)
ls cuda/cuda.xz.* > /dev/null 2>&1 && gpu=none
if [[ " $stages " == *" build "* ]] && ! ls $B/engine_native/_core*.so > /dev/null 2>&1; then
  log "build: cmake (CBS_GPU=$gpu, CUDA sm_90, CPU module for this machine); flags in the environment: $(env | grep -iE '^(C|CXX|LD|CPP|CUDA)FLAGS=' | tr '\n' ' ')"
  # The image's compiler flags (a static C++ runtime in each library breaks iostreams
  # across them) are not this build's.
  unset CFLAGS CXXFLAGS LDFLAGS CPPFLAGS
  cmake -S src -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_SOURCE_DIR="$here/ggml" -DCBS_GPU=$gpu \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCBS_CPU_ALL_VARIANTS=OFF \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v python3)" > "$OUT/build.log" 2>&1 \
  && cmake --build $B -j"$(nproc)" >> "$OUT/build.log" 2>&1
  log "build: exit $? ($(grep -c 'Building CUDA' "$OUT/build.log") CUDA objects)"
  # The CUDA module back to the caller (xz, in pieces under the 16 MB limit) for later runs.
  [ -f $B/engine_native/libggml-cuda.so ] && xz -T0 -3 -c $B/engine_native/libggml-cuda.so | split -b 15M - "$OUT/cuda.xz."
fi
ls cuda/cuda.xz.* > /dev/null 2>&1 && cat cuda/cuda.xz.* | xz -d > $B/engine_native/libggml-cuda.so
# The portable CPU modules (a wheel's) and the Vulkan module, beside the ones built here.
cp -f cpu/libggml-cpu-*.so $B/engine_native/ 2>/dev/null
[ -f vulkan/libggml-vulkan.so.xz ] && python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
  vulkan/libggml-vulkan.so.xz $B/engine_native/libggml-vulkan.so
cp -f $B/engine_native/*.so src/engine_native/
ls src/engine_native/_core*.so > /dev/null 2>&1 || { log "no engine was built: stop (build.log)"; exit 1; }
ls -la $B/engine_native/*.so >> "$OUT/steps.log" 2>&1
echo "libstdc++ symbols defined in libggml.so: $(nm -D --defined-only $B/engine_native/libggml.so | grep -c ' _ZNSt')" >> "$OUT/steps.log"
cd src
printf '#!/bin/sh\nexec python3 -c "import sys; from app.cli.main import main; sys.exit(main(sys.argv[1:]))" "$@"\n' > /tmp/cbs
chmod +x /tmp/cbs
cli() { /tmp/cbs "$@"; }
if [ ! -s "$OUT/info.txt" ]; then  # once per call, also when the script runs again for other stages
  cli info > "$OUT/info.txt" 2>&1
  for v in haswell x64 nonesuch; do echo "== CBS_CPU_VARIANT=$v" >> "$OUT/info.txt"; CBS_CPU_VARIANT=$v cli info >> "$OUT/info.txt" 2>&1; done
  echo "== CBS_GPU=none" >> "$OUT/info.txt"; CBS_GPU=none cli info >> "$OUT/info.txt" 2>&1
  log "info: $(grep -c '^device' "$OUT/info.txt") device lines"
fi
[ -n "${model_pid:-}" ] && wait $model_pid
[ -n "${mtl_pid:-}" ] && wait $mtl_pid
if [ -n "${snap_pid:-}" ]; then
  wait $snap_pid; log "reference snapshot: exit $?"
fi
if [ -n "${REF:-}" ] && [ ! -s $M/$V-f32.gguf ]; then
  cli convert $SNAP -o $M/$V-f32.gguf >> "$OUT/steps.log" 2>&1; log "convert: exit $?"
fi
[ -s $M/$V-f32.gguf ] || { log "no model: stop"; exit 1; }
# The engine marks its audio: the Perth model's skeleton (perth.skel.gguf[.xz], packed from the
# suite's perth.gguf) unpacked to random weights of its sizes, the same work as the trained ones.
if [ -z "${CBS_WATERMARK_MODEL:-}" ]; then
  [ -f "$here/perth.skel.gguf.xz" ] && [ ! -f "$here/perth.skel.gguf" ] && xz -dk "$here/perth.skel.gguf.xz"
  [ -f "$here/perth.skel.gguf" ] && [ ! -s $M/perth.gguf ] && python3 benchmarks/model_skeleton.py unpack "$here/perth.skel.gguf" $M/perth.gguf >> "$OUT/steps.log" 2>&1
  [ -s $M/perth.gguf ] && export CBS_WATERMARK_MODEL=$M/perth.gguf
fi
log "model ready"
requant_pids=""
for q in f16 q4_0; do
  if [ ! -s $M/$V-$q.gguf ]; then
    cli requantize $M/$V-f32.gguf -o $M/$V-$q.gguf --quant $q >> "$OUT/steps.log" 2>&1 &
    requant_pids="$requant_pids $!"
  fi
done

if [[ " $stages " == *" debug "* ]] && [ -f "$here/debug.py" ]; then
  log "debug: $here/debug.py under cuda-gdb"
  timeout 120 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt -ex "thread apply all bt 8" \
    --args python3 "$here/debug.py" $M/turbo-f32.gguf > /tmp/debug.log 2>&1
  log "debug: exit $?"; grep -v "^\[New Thread\|^\[Thread" /tmp/debug.log | tail -150 >> "$OUT/steps.log"
fi

if [[ " $stages " == *" tests "* ]]; then
  log "tests: gpu (${CBS_TEST_DEVICE:-the first GPU})"
  if [ -n "${TESTS_K:-}" ]; then sels=("$TESTS_K"); else sels=("not greedy" "greedy"); fi
  # Tests that read the Q4_0 model too (test_t3_batch.py) wait for its requantisation.
  if [ -n "${TESTS_Q4:-}" ]; then
    for i in $(seq 90); do [ -s $M/$V-q4_0.gguf ] && break; sleep 2; done
    export CBS_TEST_MODEL_Q4=$M/$V-q4_0.gguf
  fi
  for round in $(seq ${TESTS_REPEAT:-1}); do
    for sel in "${sels[@]}"; do
      tfile=tests/engine_native/src/core/test_backend_gpu.py; [ "$V" = mtl ] && tfile=tests/engine_native/src/core/test_backend_gpu_mtl.py
      tfile=${TESTS_FILE:-$tfile}
      CBS_TEST_MODEL=$M/turbo-f32.gguf CBS_TEST_MTL_MODEL=$M/mtl-f32.gguf timeout ${TESTS_TIMEOUT:-240} \
        python3 -m pytest -q -s -p no:cacheprovider $tfile -k "$sel" \
        >> "$OUT/tests.log" 2>&1
      log "tests -k '$sel' (round $round): exit $? $(tail -1 "$OUT/tests.log")"
    done
  done
fi

if [[ " $stages " == *" probe "* ]]; then
  for dq in ${PROBE:-cuda:0/f32}; do
    d=${dq%/*} q=${dq#*/}
    for i in $(seq 90); do [ -s $M/$V-$q.gguf ] && break; sleep 2; done
    log "probe $d $q"
    PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 benchmarks/gpu_probe.py $M/$V-$q.gguf $d >> "$OUT/bench.txt" 2>&1
    log "probe $d $q: exit $?"
    echo "== profile $d $q" >> "$OUT/profile.txt"
    CBS_PROFILE_OPS=1 PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 60 python3 benchmarks/gpu_probe.py $M/$V-$q.gguf $d --profile \
      2>&1 | grep -v "^ggml_\|^load_backend" >> "$OUT/profile.txt"
    log "profile $d $q: exit $?"
  done
fi
if [[ " $stages " == *" bench "* ]]; then
  for dq in ${BENCH:-cuda:0/f32 cuda:0/q4_0 cuda:0/f16 vulkan:0/f32 vulkan:0/q4_0}; do
    IFS=/ read -r d q tok <<< "$dq"  # device/quant[/speech tokens]
    toks=(); [ -n "$tok" ] && toks=(--tokens "$tok")
    if [ $(( $(date +%s) - ${T0:-0} )) -gt ${DEADLINE:-100000000000} ]; then log "bench $dq: skipped (past ${DEADLINE} s)"; continue; fi
    for i in $(seq 90); do [ -s $M/$V-$q.gguf ] && break; sleep 2; done
    log "bench $dq"
    echo "== bench $dq ${BENCH_ARGS:-} ${toks[*]}" >> "$OUT/bench.txt"
    ref=(); [[ " ${REF_BENCH:-} " == *" $dq "* ]] && ref=(--reference $SNAP)
    CBS_REF_PYTHON=$(command -v python3) timeout $(( ${BENCH_TIMEOUT:-150} + ${#ref[@]} * ${REF_TIMEOUT:-60} )) \
      /tmp/cbs bench -m $M/$V-$q.gguf --device $d ${BENCH_ARGS:-} "${toks[@]}" "${ref[@]}" >> "$OUT/bench.txt" 2>&1
    log "bench $dq: exit $?"
  done
fi
if [[ " $stages " == *" streams "* ]]; then
  # benchmarks/bench_streams.py: STREAMS device/quant pairs, N concurrent streams in-process
  # (STREAMS_N) for each STREAMS_BATCH mode, then the server with SERVER_CLIENTS openai
  # clients (0: skipped).
  for dq in ${STREAMS:-cuda:0/q4_0}; do
    d=${dq%/*} q=${dq#*/}
    if [ $(( $(date +%s) - ${T0:-0} )) -gt ${DEADLINE:-100000000000} ]; then log "streams $dq: skipped (past ${DEADLINE} s)"; continue; fi
    for i in $(seq 90); do [ -s $M/$V-$q.gguf ] && break; sleep 2; done
    for batch in ${STREAMS_BATCH:-auto}; do  # auto (batched on a GPU), off (round robin alone)
      for k in ${STREAMS_REPLICAS:-1}; do  # copies of the model, each with its own worker thread
        log "streams $dq: N = ${STREAMS_N:-1,4,16,32}, batch $batch, replicas $k"
        echo "== streams $dq batch $batch replicas $k" >> "$OUT/streams.txt"
        timeout ${STREAMS_TIMEOUT:-240} python3 benchmarks/bench_streams.py -m $M/$V-$q.gguf --device $d --batch $batch \
          --streams ${STREAMS_N:-1,4,16,32} --replicas $k ${STREAMS_ARGS:-} >> "$OUT/streams.txt" 2>&1
        log "streams $dq batch $batch replicas $k: exit $?"
      done
    done
    for k in ${SERVER_REPLICAS:-1}; do
      [ "${SERVER_CLIENTS:-16}" -gt 0 ] && [ $(( $(date +%s) - ${T0:-0} )) -le ${DEADLINE:-100000000000} ] || continue
      log "streams $dq: server --parallel ${SERVER_CLIENTS:-16} --replicas $k, ${SERVER_CLIENTS:-16} clients"
      BENCH_SERVER_LOG=/tmp/serve.log timeout ${STREAMS_TIMEOUT:-240} python3 benchmarks/bench_streams.py -m $M/$V-$q.gguf \
        --device $d --server --parallel ${SERVER_CLIENTS:-16} --clients ${SERVER_CLIENTS:-16} --replicas $k \
        ${STREAMS_ARGS:-} >> "$OUT/streams.txt" 2>&1
      log "streams $dq server replicas $k: exit $?"; tail -20 /tmp/serve.log >> "$OUT/streams.txt" 2>/dev/null
    done
  done
fi
[ -n "$requant_pids" ] && wait $requant_pids  # a later run on the same machine finds them
# At most 8 files come back: steps.log, build.log (its tail), info.txt, tests.log, bench.txt, profile.txt.
tail -c 2000000 "$OUT/build.log" > /tmp/build.tail 2>/dev/null && mv /tmp/build.tail "$OUT/build.log"
log "done"
