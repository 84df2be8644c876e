"""Where fp4moe.torch keeps its layers: the ids its ops take, and the layers
fused_moe prepared from an engine's weights. Plain Python (no torch import),
so the CPU tests cover it."""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Dict, Hashable, Optional, Sequence, Tuple


class LayerRegistry:
    """Layers by integer id. Ids are never reused: a graph or a module that kept
    the id of an unregistered layer gets an error, not another layer."""

    def __init__(self) -> None:
        self._layers: Dict[int, Any] = {}
        self._next_id = itertools.count(1)  # next() on it is atomic under the GIL

    def register(self, layer: Any) -> int:
        lid = next(self._next_id)
        self._layers[lid] = layer
        return lid

    def unregister(self, lid: int) -> None:
        self._layers.pop(lid, None)

    def __getitem__(self, lid: int) -> Any:
        try:
            return self._layers[lid]
        except KeyError:
            raise ValueError(f"layer: {lid} is not a registered fp4moe layer (fp4moe.torch.register)") from None


class PreparedLayers:
    """Layers prepared from weights, each kept only while every one of its owners
    (the weights' storages) lives: freeing the weights frees the layer, and new
    weights at the old addresses are never served the old layer."""

    def __init__(self) -> None:
        # key -> (entry token, weak references to the owners, layer)
        self._entries: Dict[Hashable, Tuple[object, Tuple[weakref.ref, ...], Any]] = {}
        # owners die on any thread; reentrant, as freeing a replaced layer may free an owner
        self._lock = threading.RLock()

    def get(self, key: Hashable, owners: Sequence[Any]) -> Optional[Any]:
        entry = self._entries.get(key)
        if entry is None:
            return None
        _, refs, layer = entry
        if len(refs) != len(owners) or any(r() is not o for r, o in zip(refs, owners)):
            return None
        return layer

    def put(self, key: Hashable, owners: Sequence[Any], layer: Any) -> None:
        # The callback holds a token, not the entry: no reference cycle keeps a dropped layer alive.
        token = object()
        cache = weakref.ref(self)

        def drop(_: weakref.ref) -> None:
            c = cache()
            if c is not None:
                with c._lock:
                    entry = c._entries.get(key)
                    if entry is not None and entry[0] is token:  # a later entry under the key stays
                        del c._entries[key]

        refs = tuple(weakref.ref(o, drop) for o in owners)
        with self._lock:
            self._entries[key] = (token, refs, layer)

    def __len__(self) -> int:
        return len(self._entries)
