"""Lower a data-parallel stack of layers run by `lax.scan` with JAX (Shardy) to generic MLIR.

Run once with JAX installed (not at test time): `python make_scan_layers.py OUT_DIR` writes
`scan_layers.stablehlo.generic.mlir`. Four host devices form one data-parallel axis `dp`;
the L = 4 layers' weights are stacked and `lax.scan` runs the forward over them, so the
forward and the backward are each one `stablehlo.while` in the canonical counter form (an
i32 counter from 0, `compare LT` against the constant 4, incremented by 1). Each layer's
weight passes through `synced`, the identity whose gradient is the `pmean` of its
cotangent, so the backward loop's body averages its layer's gradient itself (one
`stablehlo.all_reduce` per trip, as frameworks overlap gradient sync with the backward).
"""

import os
import sys
from functools import partial

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

N, B, D, L = 4, 16, 128, 4  # devices, batch per device, model dim, layers


@jax.custom_vjp
def synced(w: jax.Array) -> jax.Array:
    """The identity; its gradient is averaged over the data-parallel ranks."""
    return w


def _synced_fwd(w: jax.Array) -> tuple[jax.Array, None]:
    return w, None


def _synced_bwd(_: None, g: jax.Array) -> tuple[jax.Array]:
    return (jax.lax.pmean(g, "dp"),)


synced.defvjp(_synced_fwd, _synced_bwd)


def loss_fn(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    def layer(h: jax.Array, wl: jax.Array) -> tuple[jax.Array, None]:
        return jnp.tanh(h @ synced(wl)), None

    out, _ = jax.lax.scan(layer, x, w)
    return jnp.mean((out - y) ** 2)


def main(out_dir: str) -> None:
    mesh = jax.make_mesh((N,), ("dp",))

    @partial(
        jax.shard_map,
        mesh=mesh,
        in_specs=(P(), P("dp"), P("dp")),
        out_specs=(P(), P()),
        check_vma=False,
    )
    def train_step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        loss, g = jax.value_and_grad(loss_fn)(w, x, y)
        return w - 0.1 * g, jax.lax.pmean(loss, "dp")

    w = jnp.zeros((L, D, D))
    batch = NamedSharding(mesh, P("dp"))
    x = jax.device_put(jnp.ones((N * B, D)), batch)
    y = jax.device_put(jnp.zeros((N * B, D)), batch)
    lowered = jax.jit(train_step).lower(w, x, y)
    module = lowered.compiler_ir("stablehlo")
    text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
    with open(os.path.join(out_dir, "scan_layers.stablehlo.generic.mlir"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
