"""The reference runtime's settings for tests that talk to it in a thread: it answers at once
(no start-up, fast decode and prefill), quietly, and as the sim profile starts it (thinking off
by default as a gateway expects, /metrics and the cache report on)."""

FAST = {
    "startup_seconds": 0.0,
    "decode_tps": 20000.0,
    "prefill_tps": 1e8,
    "log_requests": False,
    "default_chat_template_kwargs": '{"enable_thinking": false}',
    "enable_metrics": True,
    "enable_cache_report": True,
}
