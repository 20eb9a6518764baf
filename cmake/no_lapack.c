/* FATHOM_MINIMAL builds without LAPACK: dsyev_ reports failure (info = -1),
 * so fathom_basis_fit returns FATHOM_ERR_NUMERIC instead of linking fails. */
void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
            double *w, double *work, const int *lwork, int *info);
void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
            double *w, double *work, const int *lwork, int *info) {
    (void)jobz, (void)uplo, (void)n, (void)a, (void)lda, (void)w, (void)work, (void)lwork;
    *info = -1;
}
