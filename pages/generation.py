"""generation page (placeholder until its issue lands)."""
import streamlit as st

st.title("Generation")
st.info("This page is being built.")
