"""Which environment variables tracelens records (nsys exports, collector manifests).

Kept free of heavy imports: the collector agent loads it inside every worker process.
"""

from __future__ import annotations

# Environment that explains results, kept from nsys exports and collector manifests. An allow-list: exact
# names and prefixes, minus anything that looks like a credential, so no token or key is ever stored.
ENV_NAMES = ("CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "TORCH_DISTRIBUTED_DEBUG")
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "UCX_", "FI_")
_ENV_DENIED = ("KEY", "TOKEN", "SECRET", "PASS", "CRED", "AUTH", "CERT")


def env_allowed(name: str) -> bool:
    """Whether an environment variable may be recorded (see ENV_NAMES / ENV_PREFIXES)."""
    upper = name.upper()
    if any(word in upper for word in _ENV_DENIED):
        return False
    return name in ENV_NAMES or name.startswith(ENV_PREFIXES)


def allowed_env(env) -> dict[str, str]:
    """The allow-listed part of an environment mapping, sorted by name."""
    return {k: str(env[k]) for k in sorted(env) if env_allowed(k)}
