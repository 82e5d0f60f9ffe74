"""explainers page (placeholder until its issue lands)."""
import streamlit as st

st.title("Explainers")
st.info("This page is being built.")
