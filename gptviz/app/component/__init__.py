"""The in-browser attention heatmap (Streamlit components v2): attention_map.py, with its .js and .css."""
