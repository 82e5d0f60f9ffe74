"""Pure Plotly factories: data in, go.Figure out. No Streamlit, no I/O.

One module per subject (attention, generation, embeddings, activations, params, norms, training,
explainers); `common` holds what they share.
"""
