"""placeholder"""
from cuvil.lower.templates.spec import Unsupported


def match(graph, part, node):
    return None


def generate(group, ctx):
    raise Unsupported("not yet")
