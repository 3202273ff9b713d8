"""The sim's KV cache: a pool of fixed-size blocks with a prefix cache over it.

Pure code. Like vLLM's block manager: a full block of prompt tokens is named by a hash
chained over every token before it, so two prompts share a block only when they agree
on everything up to its end. Blocks held by running requests are pinned (reference
counted); a released block keeps its hash and sits in an LRU list, reusable on a hit,
evicted (oldest first) when the pool needs room. With caching off released blocks are
forgotten. SGLang's radix cache is the same thing with one-token pages (`--page-size 1`).
"""

from __future__ import annotations

from collections import OrderedDict


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    """The chained hash of every full block of a prompt."""
    hashes = []
    previous = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        previous = hash((previous, tuple(token_ids[start:start + block_size])))
        hashes.append(previous)
    return hashes


class KVBlocks:
    """Block accounting: `used` blocks are pinned, `cached` ones are free but remembered."""

    def __init__(self, total_blocks: int, block_size: int, caching: bool):
        self.total = total_blocks
        self.block_size = block_size
        self.caching = caching
        self.used = 0
        self.refs: dict[int, int] = {}
        self.cached: OrderedDict[int, None] = OrderedDict()

    @property
    def free(self) -> int:
        """Blocks an allocation may take (cached blocks are evicted on demand)."""
        return self.total - self.used

    def hit_blocks(self, hashes: list[int], limit: int) -> int:
        """How many leading blocks of a prompt are in the cache, at most `limit`."""
        if not self.caching:
            return 0
        count = 0
        for digest in hashes[:limit]:
            if digest not in self.refs and digest not in self.cached:
                break
            count += 1
        return count

    def pin_cost(self, hashes: list[int]) -> int:
        """Free blocks that pinning these hits takes: the cached ones leave the free pool."""
        return sum(1 for digest in hashes if digest not in self.refs)

    def pin_hits(self, hashes: list[int]) -> None:
        """Take the hit blocks for a request: shared, not newly allocated."""
        for digest in hashes:
            if digest in self.refs:
                self.refs[digest] += 1
            else:
                del self.cached[digest]
                self.refs[digest] = 1
                self.used += 1

    def allocate(self, blocks: int) -> bool:
        if blocks > self.free:
            return False
        self.used += blocks
        while self.cached and self.used + len(self.cached) > self.total:
            self.cached.popitem(last=False)
        return True

    def register(self, digest: int) -> bool:
        """A request filled a prompt block: make it shareable. False if someone else already did."""
        if not self.caching or digest in self.refs or digest in self.cached:
            return False
        self.refs[digest] = 1
        return True

    def release(self, hashed: list[int], private_blocks: int) -> None:
        """Give back a request's blocks; hashed ones stay cached, the prompt's head last to go."""
        self.used -= private_blocks
        for digest in reversed(hashed):
            left = self.refs[digest] - 1
            if left:
                self.refs[digest] = left
                continue
            del self.refs[digest]
            self.used -= 1
            if self.caching:
                self.cached[digest] = None
