"""Entry point for `langgraph dev` / LangGraph Studio (see langgraph.json).

Compiled without a checkpointer: the server persists threads itself. Building it imports the
toolbox and the expert model (cheap); it never imports torch in this process.
"""

from graph.main import compile_graph

graph = compile_graph()
