"""embeddings page (placeholder until its issue lands)."""
import streamlit as st

st.title("Embeddings")
st.info("This page is being built.")
