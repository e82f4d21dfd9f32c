"""The template model: Jinja tokens with exact positions, helper calls, statements, names."""

from kls.template.model import (
    Argument,
    HelperCall,
    SyntaxProblem,
    TemplateModel,
    parse_template,
)

__all__ = ["Argument", "HelperCall", "SyntaxProblem", "TemplateModel", "parse_template"]
