"""fp4moe.torch's layer ids and fused_moe's prepared layers, on plain objects
(the registry and the cache import no torch)."""

import gc
import threading
import weakref

import pytest

from fp4moe._registry import LayerRegistry, PreparedLayers


class Layer:
    pass


class Storage:
    pass


def test_ids_are_never_reused():
    reg = LayerRegistry()
    a, b = Layer(), Layer()
    ida, idb = reg.register(a), reg.register(b)
    reg.unregister(ida)
    c = Layer()
    idc = reg.register(c)
    assert len({ida, idb, idc}) == 3
    assert reg[idb] is b and reg[idc] is c
    with pytest.raises(ValueError, match=f"layer: {ida} is not a registered fp4moe layer"):
        reg[ida]
    reg.unregister(ida)  # twice is harmless
    assert reg[idb] is b


def test_ids_are_distinct_across_threads():
    reg = LayerRegistry()
    ids = []

    def work():
        mine = [reg.register(Layer()) for _ in range(500)]
        for lid in mine[::2]:
            reg.unregister(lid)
        ids.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == len(set(ids)) == 4000


def test_prepared_layer_goes_with_its_weights():
    cache = PreparedLayers()
    owners = (Storage(), Storage())
    layer = Layer()
    gone = weakref.ref(layer)
    cache.put("key", owners, layer)
    assert cache.get("key", owners) is layer
    del layer
    gc.disable()  # freed by reference counting alone, not at some later collection
    try:
        owners = None
        assert len(cache) == 0 and gone() is None
    finally:
        gc.enable()


def test_new_weights_at_the_old_key_are_not_served_the_old_layer():
    cache = PreparedLayers()
    old = (Storage(), Storage())
    cache.put("key", old, Layer())
    assert cache.get("key", (Storage(), old[1])) is None
    assert cache.get("key", old[:1]) is None


def test_a_replaced_entry_dying_leaves_its_successor():
    cache = PreparedLayers()
    old = (Storage(),)
    cache.put("key", old, Layer())
    new, newer = (Storage(),), Layer()
    cache.put("key", new, newer)
    del old
    assert cache.get("key", new) is newer
    del new
    assert len(cache) == 0


def test_the_cache_itself_can_go_first():
    cache = PreparedLayers()
    owners = (Storage(),)
    cache.put("key", owners, Layer())
    del cache
    del owners  # the callback finds no cache and does nothing
