"""What every part of the REST API shares: authentication, scoping, errors, paging."""
