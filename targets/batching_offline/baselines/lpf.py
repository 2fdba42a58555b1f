"""Longest prompt first: the longest jobs start early, so none is left to run alone at the end."""


def priority(r, p):
    return r.prompt
