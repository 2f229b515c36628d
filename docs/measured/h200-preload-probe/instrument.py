import re
import sys
from pathlib import Path

S = sys.argv[1] + "/sglang/srt/"
p = S + "utils/common.py"
s = Path(p).read_text()
s += """
_pg=get_available_gpu_memory
def get_available_gpu_memory(*a,**k):
    v=_pg(*a,**k);import traceback as T
    w=" < ".join(f"{f.filename.split('/srt/')[-1]}:{f.lineno}" for f in reversed(T.extract_stack(limit=4)[:-1]))
    f,_=torch.cuda.mem_get_info();logger.info(f"PROBE {v:.5f} free_mib={f/2**20:.1f} alloc_mib={torch.cuda.memory_allocated()/2**20:.1f} at {w}");return v
"""
Path(p).write_text(s)
p = S + "model_executor/model_runner.py"
s = Path(p).read_text()
for t in [
    "self.forward_stream = torch.get_device_module(self.device).Stream()",
    "set_offloader(",
    "if deep_gemm_wrapper.ENABLE_JIT_DEEPGEMM:",
    "self.hisparse_coordinator = None\n\n        # Load",
    "self.maybe_init_expert_location_metadata()",
    "self.init_token_oracle()",
    "self.sampler = create_sampler()",
    "self.load_model()\n        prepare_moe_topk",
]:
    m = re.search(r"\n( +)" + re.escape(t), s)
    s = s[: m.start()] + f"\n{m.group(1)}get_available_gpu_memory(self.device, self.gpu_id)" + s[m.start() :]
Path(p).write_text(s)
