"""Shortest prompt first: short prefills reach decoding soonest; submission order breaks ties."""


def priority(r, p):
    return -r.prompt
