"""The fields of a tinker-cookbook recipe's `CLIConfig`, read from its source without importing it
(the recipe imports torch, tinker and verifiers; its config class is plain annotated fields).

usage: recipe_config.py RECIPE.py   prints {"FIELD": {"annotation": "int", "default": 32}, ...} as
JSON: `default` is the literal default, or absent when the field has none or it is not a literal.
"""

import ast
import json
import sys


def fields(source: str) -> dict:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "CLIConfig":
            found = {}
            for item in node.body:
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                    continue
                field = {"annotation": ast.unparse(item.annotation)}
                if item.value is not None:
                    try:
                        field["default"] = ast.literal_eval(item.value)
                    except ValueError:
                        pass
                found[item.target.id] = field
            return found
    raise SystemExit("no class CLIConfig in the recipe")


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as recipe:
        print(json.dumps(fields(recipe.read())))
