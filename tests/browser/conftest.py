def pytest_configure(config):
    config.addinivalue_line("markers",
                            "browser: drives JupyterLab in headless Chromium (deselect with -m 'not browser')")
