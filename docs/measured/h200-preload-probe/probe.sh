W=/tmp/gpu-check;R=$OUT;mkdir -p $W
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false NCCL_NVLS_ENABLE=0 TRITON_CACHE_DIR=$W/c/t TVM_FFI_CACHE_DIR=$W/c/v
[ -d /usr/local/cuda ]&&export CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH
if [ ! -f $W/site/.ok ];then mkdir -p $W/site;tar -xJf .gpu/overlay.tar.xz -C $W/site;python3 i.py $W/site&&touch $W/site/.ok;fi
[ -d $W/models ]||tar -xJf .gpu/models.tar.xz -C $W
nvidia-smi --query-gpu=memory.used,memory.free --format=csv
C="--host 127.0.0.1 --port 30000 --enable-metrics --load-format dummy --attention-backend triton --sampling-backend pytorch --disable-prefill-cuda-graph --speculative-algorithm NEXTN --speculative-eagle-topk 1"
H="--model-path $W/models/qwen36-tiny $C --context-length 32768 --mem-fraction-static 0.5 --max-running-requests 16 --cuda-graph-max-bs 16 --speculative-num-steps 3 --speculative-num-draft-tokens 4"
A="--model-path $W/models/qwen36-35b-a3b-shape $C --context-length 262144 --mem-fraction-static 0.55 --max-running-requests 8 --speculative-num-steps 5 --speculative-num-draft-tokens 6 --mamba-ssm-dtype bfloat16 --mamba-radix-cache-strategy no_buffer --disable-overlap-schedule --kv-cache-dtype bfloat16 --grammar-backend none --disable-decode-cuda-graph"
for n in ${PLANS:-h1 a h2};do case $n in h*)X=$H;;a*)X=$A;;esac
nvidia-smi --query-gpu=memory.free --format=csv,noheader
PYTHONPATH=$W/site setsid python3 -m sglang.launch_server $X >$R/$n.log 2>&1 & p=$!;t=$(date +%s)
while kill -0 $p 2>/dev/null;do grep -q max_total_num_tokens= $R/$n.log&&break;[ $(($(date +%s)-t)) -gt 150 ]&&break;sleep 1;done
kill -KILL -- -$p;sleep 5;echo "== $n $(($(date +%s)-t))s"
grep -E "PROBE|Load weight|Mamba Cache|KV Cache|Memory pool end|max_total|Error|error" $R/$n.log|sed 's/^\[[^]]*\] //'|cut -c1-230;done
