package org.s3io.spark;

import java.util.List;

import org.apache.spark.JobArtifactSet$;
import org.apache.spark.JobArtifactState;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.classic.SparkSession$;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceCreationResult;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonFilterPushdownResult;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSourceFilterPushdownRunner;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Plans the read in one Python planning call: the reader for the pruned schema, its {@code pushFilters} with the
 * pushed filters (none is fine), then its partitions and read function. The plan is this scan's own: nothing is
 * stored on the shared data source object, so a self-union with different filters reads each side's own rows.
 * Tasks read through {@link S3ParquetReaderFactory}: the read function's Arrow batches as columnar batches.
 */
public class S3ParquetBatch implements Batch {
  private final PythonDataSourceV2 source;
  private final String shortName;
  private final StructType schema;
  private final StructType readSchema;
  private final CaseInsensitiveStringMap options;
  private final Filter[] pushed;
  private final Option<String> jobArtifactUuid;
  private final Option<String> sessionUuid;
  private PythonDataSourceReadInfo planned;

  public S3ParquetBatch(
      PythonDataSourceV2 source,
      String shortName,
      StructType schema,
      StructType readSchema,
      CaseInsensitiveStringMap options,
      Filter[] pushed) {
    this.source = source;
    this.shortName = shortName;
    this.schema = schema;
    this.readSchema = readSchema;
    this.options = options;
    this.pushed = pushed;
    Option<JobArtifactState> state = JobArtifactSet$.MODULE$.getCurrentJobArtifactState();
    this.jobArtifactUuid = state.isDefined() ? Option.apply(state.get().uuid()) : Option.empty();
    Option<SparkSession> active = SparkSession$.MODULE$.getActiveSession();
    this.sessionUuid = active.isDefined() ? Option.apply(active.get().sessionUUID()) : Option.empty();
  }

  private synchronized PythonDataSourceReadInfo plan() {
    if (planned == null) {
      PythonDataSourceCreationResult created =
          source.getOrCreateDataSourceInPython(shortName, options, Option.apply(schema));
      UserDefinedPythonDataSource python = source.source();
      UserDefinedPythonDataSourceFilterPushdownRunner runner =
          new UserDefinedPythonDataSourceFilterPushdownRunner(
              python.createPythonFunction(created.dataSource()),
              readSchema,
              CollectionConverters.asScala(List.of(pushed)).toSeq());
      PythonFilterPushdownResult result = runner.runInPython(runner.runInPython$default$1());
      planned = result.readInfo();
    }
    return planned;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    List<byte[]> partitions = CollectionConverters.asJava(plan().partitions());
    InputPartition[] out = new InputPartition[partitions.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = new PythonInputPartition(i, partitions.get(i));
    }
    return out;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new S3ParquetReaderFactory(source.source(), plan().func(), readSchema, jobArtifactUuid, sessionUuid);
  }
}
