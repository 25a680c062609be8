"""The per-world level curriculum over the terrain's tiles (JAX): each world's level,
column and spawn point, and the level rule applied when its episode ends.

The rule (Isaac Lab's) is told in :mod:`mjxrunner.kit.terrain`, which re-exports
everything here.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mjxrunner.engine import checks
from mjxrunner.engine.worlds import pytree_dataclass, world_field
from mjxrunner.kit.terrain_grid import TerrainConfig


@pytree_dataclass
class Curriculum:
    """Each world's place on the terrain.

    Attributes:
      level: ``(num_envs,)`` int32, the world's difficulty level.
      column: ``(num_envs,)`` int32, the world's column (terrain type), for life.
      spawn: ``(num_envs, 3)`` float32, where the current episode started: the
        tile's origin plus the world's random horizontal offset, z the ground.
    """

    level: jax.Array = world_field(0)
    column: jax.Array = world_field(0)
    spawn: jax.Array = world_field(1)


def _world_keys(keys: jax.Array, name: str = "keys") -> jax.Array:
    """``(n, 2)`` raw uint32 keys from raw or typed per-world keys."""
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        if keys.ndim != 1:
            raise ValueError(f"{name} must be (num_envs,) typed keys, got shape {keys.shape}")
        return jax.random.key_data(keys)
    if keys.ndim != 2 or keys.shape[1] != 2 or keys.dtype != jnp.uint32:
        raise ValueError(
            f"{name} must be (num_envs, 2) uint32 raw keys or (num_envs,) typed keys, "
            f"got shape {keys.shape} dtype {keys.dtype}"
        )
    return keys


def _check_worlds(n: int, **arrays: tuple[jax.Array, tuple[int, ...]]) -> None:
    for name, (value, core) in arrays.items():
        if jnp.shape(value) != (n, *core):
            raise ValueError(f"{name} must have shape {(n, *core)}, got {jnp.shape(value)}")


def _typed_key(key: jax.Array) -> jax.Array:
    """One world's key as a typed key, from a typed key or ``(2,)`` uint32 raw data."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


def _level_draw(key: jax.Array, count: int) -> jax.Array:
    """``()`` int32 uniform in ``[0, count)`` from one world's typed key."""
    return jax.random.randint(key, (), 0, count).astype(jnp.int32)


def _next_level(
    key: jax.Array,
    level: jax.Array,
    walked: jax.Array,
    commanded: jax.Array,
    levels: int,
    up_distance: float,
    down_fraction: float,
) -> jax.Array:
    """One world's level after its episode (the rule of :mod:`mjxrunner.kit.terrain`)."""
    up = walked > up_distance
    down = (walked < down_fraction * commanded) & ~up
    new = level + up.astype(jnp.int32) - down.astype(jnp.int32)
    anywhere = _level_draw(key, levels)
    return jnp.where(new >= levels, anywhere, jnp.maximum(new, 0)).astype(jnp.int32)


def _spawn(
    key: jax.Array, level: jax.Array, column: jax.Array, origins: jax.Array, radius: float
) -> jax.Array:
    """``(3,)``: the origin of tile ``(level, column)`` plus a horizontal offset
    uniform in ``[-radius, radius]^2``."""
    offset = jax.random.uniform(key, (2,), jnp.float32, -1, 1)
    return origins[level, column] + jnp.concatenate([radius * offset, jnp.zeros(1)])


def _origins(origins: Any) -> jax.Array:
    if jnp.ndim(origins) != 3 or jnp.shape(origins)[2] != 3:
        raise ValueError(f"origins must be (levels, columns, 3), got {jnp.shape(origins)}")
    return jnp.asarray(origins, jnp.float32)


def initial_levels(keys: jax.Array, max_initial_level: int) -> jax.Array:
    """``(num_envs,)`` int32 levels, uniform in ``[0, max_initial_level]``, each
    from its world's key (``(num_envs, 2)`` raw or ``(num_envs,)`` typed)."""
    keys = _world_keys(keys)
    checks.count(max_initial_level, "max_initial_level", minimum=0)
    return jax.vmap(lambda k: _level_draw(_typed_key(k), max_initial_level + 1))(keys)


def world_columns(num_envs: int, columns: int) -> jax.Array:
    """``(num_envs,)`` int32: world ``i`` gets column ``i % columns``, so every
    column (and each type, in its proportion) gets worlds evenly."""
    checks.count(num_envs, "num_envs")
    checks.count(columns, "columns")
    return jnp.arange(num_envs, dtype=jnp.int32) % columns


def next_levels(
    keys: jax.Array,
    level: jax.Array,
    walked: jax.Array,
    commanded: jax.Array,
    levels: int,
    up_distance: float,
    down_fraction: float,
) -> jax.Array:
    """Levels after an episode: the rule of :mod:`mjxrunner.kit.terrain`.

    Args:
      keys: ``(num_envs, 2)`` raw or ``(num_envs,)`` typed per-world keys; a world
        that leaves the top level draws its new level from its own key.
      level: ``(num_envs,)`` int, the levels the episodes were played at.
      walked: ``(num_envs,)`` horizontal distance from spawn to the episode's end.
      commanded: ``(num_envs,)`` the distance the episode's command asked for
        (e.g. commanded speed times the episode's full duration).
      levels: number of levels.
      up_distance: walked farther than this moves up (``up_fraction * tile_size``).
      down_fraction: walked less than this times ``commanded`` moves down.

    Returns:
      ``(num_envs,)`` int32 levels in ``[0, levels)``.
    """
    keys = _world_keys(keys)
    n = keys.shape[0]
    _check_worlds(n, level=(level, ()), walked=(walked, ()), commanded=(commanded, ()))
    checks.count(levels, "levels")

    def one(key, level, walked, commanded):
        return _next_level(
            _typed_key(key), level, walked, commanded, levels, up_distance, down_fraction
        )

    return jax.vmap(one)(keys, jnp.asarray(level, jnp.int32), walked, commanded)


def spawn_points(
    keys: jax.Array, level: jax.Array, column: jax.Array, origins: jax.Array, radius: float
) -> jax.Array:
    """``(num_envs, 3)``: each world's tile origin ``origins[level, column]`` plus a
    horizontal offset uniform in ``[-radius, radius]^2`` from its own key.

    ``origins`` is :attr:`Terrain.origins`, ``(levels, columns, 3)``; the platform
    around each origin is flat, so z stays the ground height.
    """
    keys = _world_keys(keys)
    n = keys.shape[0]
    _check_worlds(n, level=(level, ()), column=(column, ()))
    origins = _origins(origins)
    return jax.vmap(lambda k, lv, c: _spawn(_typed_key(k), lv, c, origins, radius))(
        keys, level, column
    )


# --- one world: what a task's curriculum hooks call (the env vmaps them) ------------------


def start_world(
    key: jax.Array, world: jax.Array, origins: jax.Array, config: TerrainConfig
) -> Curriculum:
    """One world's :class:`Curriculum` at the start of a run (unbatched leaves:
    ``level`` and ``column`` ``()``, ``spawn`` ``(3,)``): a level uniform in
    ``[0, max_initial_level]``, column ``world % columns``, a spawn point on that
    tile. :func:`init` is this for every world.

    Args:
      key: the world's typed key (or ``(2,)`` raw key data).
      world: ``()`` int, the world's index in the batch.
      origins: ``(levels, columns, 3)``, :attr:`Terrain.origins`.
      config: the terrain's config.
    """
    k_level, k_spawn = jax.random.split(_typed_key(key))
    level = _level_draw(k_level, config.max_initial_level + 1)
    column = jnp.asarray(world, jnp.int32) % config.columns
    spawn = _spawn(k_spawn, level, column, _origins(origins), config.spawn_radius)
    return Curriculum(level=level, column=column, spawn=spawn)


def end_episode(
    state: Curriculum,
    key: jax.Array,
    position: jax.Array,
    commanded: jax.Array,
    origins: jax.Array,
    config: TerrainConfig,
) -> Curriculum:
    """One world's :class:`Curriculum` after its episode ended: its new level
    (the rule of :mod:`mjxrunner.kit.terrain`) and the spawn point of its next episode.
    :func:`end_episodes` is this for the worlds that ended.

    Args:
      state: the world's curriculum (unbatched).
      key: the world's typed key (or ``(2,)`` raw key data).
      position: ``(2 or 3,)`` where the robot ended (e.g. its root's position).
      commanded: ``()`` the distance the episode's command asked for.
      origins: ``(levels, columns, 3)``, :attr:`Terrain.origins`.
      config: the terrain's config.
    """
    k_level, k_spawn = jax.random.split(_typed_key(key))
    walked = jnp.linalg.norm(position[:2] - state.spawn[:2])
    level = _next_level(
        k_level,
        state.level,
        walked,
        commanded,
        config.levels,
        config.up_fraction * config.tile_size,
        config.down_fraction,
    )
    spawn = _spawn(k_spawn, level, state.column, _origins(origins), config.spawn_radius)
    return state.replace(level=level, spawn=spawn)


def init(keys: jax.Array, origins: jax.Array, config: TerrainConfig) -> Curriculum:
    """Every world's start: :func:`start_world` for world ``i`` with its key
    (``(num_envs, 2)`` raw or ``(num_envs,)`` typed)."""
    keys = _world_keys(keys)
    origins = _origins(origins)
    world = jnp.arange(keys.shape[0], dtype=jnp.int32)
    return jax.vmap(lambda k, w: start_world(k, w, origins, config))(keys, world)


def end_episodes(
    state: Curriculum,
    keys: jax.Array,
    done: jax.Array,
    position: jax.Array,
    commanded: jax.Array,
    origins: jax.Array,
    config: TerrainConfig,
) -> Curriculum:
    """The curriculum after the episodes of the worlds in ``done`` ended: their new
    levels and the spawn points of their next episodes (:func:`end_episode`). Other
    worlds are unchanged.

    Args:
      state: the current :class:`Curriculum`.
      keys: ``(num_envs, 2)`` raw or ``(num_envs,)`` typed per-world keys.
      done: ``(num_envs,)`` bool, the worlds whose episodes ended.
      position: ``(num_envs, 2 or 3)`` where each world's robot is at the end
        (e.g. the root body's position in the terminal state).
      commanded: ``(num_envs,)`` the distance each episode's command asked for.
      origins: ``(levels, columns, 3)``, :attr:`Terrain.origins`.
      config: the terrain's config (levels, fractions, spawn radius).
    """
    keys = _world_keys(keys)
    n = keys.shape[0]
    _check_worlds(n, level=(state.level, ()), done=(done, ()), commanded=(commanded, ()))
    if jnp.ndim(position) != 2 or jnp.shape(position)[0] != n or jnp.shape(position)[1] < 2:
        raise ValueError(f"position must be (num_envs, 2 or 3), got {jnp.shape(position)}")
    origins = _origins(origins)
    new = jax.vmap(lambda s, k, p, c: end_episode(s, k, p, c, origins, config))(
        state, keys, position, commanded
    )
    pick = jax.vmap(lambda d, a, b: jnp.where(d, a, b))  # scalar done per world
    return jax.tree.map(lambda a, b: pick(done, a, b), new, state)
