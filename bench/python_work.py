"""A CPU-bound pure-Python program for bench/python_overhead.sh: a fixed
amount of work (recursion, dicts, strings, objects) with stacks of about 20
Python frames. Prints "checksum C thread_cpu_s T" (this thread's CPU time,
as it measures it). Usage: python_work.py ROUNDS (0: no work)."""
import sys
import time


class Node:
    __slots__ = ("key", "left", "right")

    def __init__(self, key):
        self.key, self.left, self.right = key, None, None


def insert(root, key):
    node = root
    while True:
        if key < node.key:
            if node.left is None:
                node.left = Node(key)
                return
            node = node.left
        else:
            if node.right is None:
                node.right = Node(key)
                return
            node = node.right


def tree_work(n):
    root = Node(n // 2)
    x = 12345
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        insert(root, x % (n * 4))
    return root.key


def text_work(n):
    words = {}
    for i in range(n):
        w = "w%d" % (i % 997)
        words[w] = words.get(w, 0) + len(w)
    return sum(words.values())


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def deep(depth, n):
    if depth:
        return deep(depth - 1, n)
    return tree_work(n) + text_work(n) + fib(18)


def main():
    rounds = int(sys.argv[1])
    t0 = time.thread_time()
    checksum = 0
    for _ in range(rounds):
        checksum += deep(12, 4000)
    print("checksum %d thread_cpu_s %.6f" % (checksum,
                                             time.thread_time() - t0))


if __name__ == "__main__":
    main()
