"""placeholder"""
from cuvil.lower.templates.spec import Unsupported


def generate(group, ctx):
    raise Unsupported("not yet")
