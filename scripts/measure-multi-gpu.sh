#!/bin/bash
# deploytool's inventory, matching and per-card plans on a host with several H200s.
# Run from a deploytool tree on a host with several NVIDIA GPUs (the lent nvidia-h200-x2/x4/x8):
# `OUT=folder WHEELS=folder-of-cp312-wheels bash scripts/measure-multi-gpu.sh`. WHEELS holds what the
# host lacks (pydantic, pydantic_core, annotated-types, typing-inspection, typing_extensions, docker,
# jsonschema, jsonschema-specifications, referencing, rpds-py, starlette, uvicorn). Every output,
# with the command that made it on its first line, ends up in OUT/multi-gpu.tar.gz. Not yet run: no
# several-GPU machine was lent when it was written.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHEELS:-.whl}/*.whl || exit 3
export PYTHONPATH=$PWD/src:/tmp/site
O=${OUT:?set OUT to a folder}/r; mkdir -p $O
DT="python3 -m deploytool"
r() { local f=$1; shift; echo "\$ $*" > $O/$f; ( "$@" ) >> $O/$f 2>&1; echo "[exit $?]" >> $O/$f; }
r env.txt bash -c 'uname -a; python3 --version; nproc; python3 -m pip show nvidia-ml-py typer pydantic 2>/dev/null | grep -E "^(Name|Version)"; which docker || echo "no docker"'
r smi-L.txt nvidia-smi -L
r smi-topo.txt nvidia-smi topo -m
r smi-query.csv nvidia-smi --query-gpu=index,uuid,name,compute_cap,memory.total,memory.free,power.limit,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks.max.memory,driver_version --format=csv
r smi-nvlink.txt nvidia-smi nvlink -s
r smi-q.txt nvidia-smi -q
r nvml-probe.json python3 scripts/nvml_probe.py
r gpus.json $DT gpus --json
r gpus-again.json $DT gpus --json
COLUMNS=200 r gpus.txt $DT gpus
mapfile -t U < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
echo "${U[@]}" > $O/uuids.txt
r slots-h200.txt $DT slots --profile h200-qwen3.6-35b-a3b-fp8
r slots-h200.json $DT slots --profile h200-qwen3.6-35b-a3b-fp8 --json
r profiles-local.json $DT profiles list --local-gpus --json
COLUMNS=200 r profiles-local.txt $DT profiles list --local-gpus
r profiles-slot2.json $DT profiles list --gpu ${U[0]} --gpu ${U[1]} --json
r render-2gpu-h200.yaml $DT render --gpu ${U[0]} --gpu ${U[1]} --profile h200-qwen3.6-35b-a3b-fp8
r render-2gpu-glm-tp4.yaml $DT render --gpu ${U[0]} --gpu ${U[1]} --profile gb300x4-glm5.2-nvfp4-tp4
r render-1gpu-h200.yaml $DT render --gpu ${U[1]} --profile h200-qwen3.6-35b-a3b-fp8
r rollout-all-dry.txt $DT rollout --profile h200-qwen3.6-35b-a3b-fp8 --all-gpus --dry-run --json
COLUMNS=200 r rollout-all-dry-human.txt $DT rollout --profile h200-qwen3.6-35b-a3b-fp8 --all-gpus --dry-run
r rollout-2slots-dry.txt $DT rollout --profile h200-qwen3.6-35b-a3b-fp8 --gpu ${U[0]} --gpu ${U[1]} --dry-run --json
for i in "${!U[@]}"; do r plan-memory-gpu$i.json $DT plan-memory --profile h200-qwen3.6-35b-a3b-fp8 --gpu ${U[$i]} --checkpoint tests/data/models/qwen3.6-35b-a3b-fp8 --json; done
r plan-memory-card-h200.json $DT plan-memory --profile h200-qwen3.6-35b-a3b-fp8 --card h200 --checkpoint tests/data/models/qwen3.6-35b-a3b-fp8 --json
cd $OUT && tar czf multi-gpu.tar.gz r && cp r/gpus.json r/smi-topo.txt . && rm -rf r && ls -la $OUT
