"""Segmented LRU: blocks hit at least once sit in a protected segment above every probationary block."""


def priority(b, p):
    protected = 1.0 if b.hits >= 1 else 0.0
    return protected * 1.0e9 + b.last_access
