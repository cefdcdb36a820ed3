use super::test_support::*;
